// The code interpreter (@e2b/code-interpreter): results, stdout, errors
// with tracebacks, state kept across calls, envs, contexts.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { runId } from './helpers.mjs'

let sbx
before(async () => { sbx = await Sandbox.create({ metadata: { suite: runId }, requestTimeoutMs: 180_000 }) }) // its default template
after(async () => { await sbx?.kill() })

test('runCode: result, stdout, state kept, envs', async () => {
  const out = []
  const ex = await sbx.runCode('import os\nprint("hi")\nx = 2\nx + 1', { onStdout: (m) => out.push(m.line) })
  assert.equal(ex.text, '3')
  assert.equal(ex.error, undefined)
  assert.deepEqual(ex.logs.stdout.join(''), 'hi\n')
  assert.equal(out.join(''), 'hi\n')
  assert.equal((await sbx.runCode('x * 10')).text, '20', 'the context keeps x')
  assert.equal((await sbx.runCode('os.environ.get("A")', { envs: { A: 'b' } })).text, "'b'")
  assert.equal((await sbx.runCode('os.environ.get("A")')).text, undefined, 'envs are per call')
})

test('runCode: errors with tracebacks', async () => {
  const ex = await sbx.runCode('def f():\n    return 1/0\nf()')
  assert.equal(ex.error.name, 'ZeroDivisionError')
  assert.equal(ex.error.value, 'division by zero')
  assert.match(ex.error.traceback, /in f/)
  assert.equal((await sbx.runCode('1 +')).error.name, 'SyntaxError')
})

test('contexts: create, list, run in one, restart, remove', async () => {
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
  assert.equal(ctx.language, 'python')
  assert.equal((await sbx.runCode('import os; y = 5; os.getcwd()', { context: ctx })).text, "'/tmp'")
  assert.equal((await sbx.runCode('y', { context: ctx })).text, '5')
  assert.equal((await sbx.runCode('"y" in dir()')).text, 'False', 'the default context is another one')
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error.name, 'NameError', 'a restart forgets')
  await sbx.removeCodeContext(ctx)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})
