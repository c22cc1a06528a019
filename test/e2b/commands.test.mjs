// commands: streaming output, stdin, envs, cwd, user, exit codes,
// errors, background processes, list and kill.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, InvalidArgumentError } from 'e2b'
import { create, killAll } from './helpers.mjs'

let sbx
before(async () => { sbx = await create({ envs: { SBX: 'sandbox-wide' } }) })
after(killAll)

test('stdout and stderr, streamed as they come', async () => {
  const seen = []
  const t0 = Date.now()
  const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; sleep 0.7; done; echo err >&2', {
    onStdout: (d) => seen.push([d, Date.now() - t0]),
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out1\nout2\nout3\n')
  assert.equal(r.stderr, 'err\n')
  assert.equal(seen.map(([d]) => d).join(''), r.stdout)
  assert.ok(seen.length >= 2, `output came in ${seen.length} event(s); want it streamed`)
  assert.ok(seen[0][1] < seen.at(-1)[1], 'the first line came before the last')
})

test('envs, cwd, user', async () => {
  assert.equal((await sbx.commands.run('echo $SBX $ONE', { envs: { ONE: 'per-command' } })).stdout, 'sandbox-wide per-command\n')
  assert.equal((await sbx.commands.run('echo ${ONE:-unset}')).stdout, 'unset\n', 'per-command envs do not persist')
  assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n')
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  assert.equal((await sbx.commands.run('whoami')).stdout, 'user\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  await assert.rejects(sbx.commands.run('pwd', { cwd: '/nonexistent-dir-xyz' }), InvalidArgumentError)
})

test('exit codes and errors', async () => {
  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'partial\n')
    return true
  })
  await assert.rejects(sbx.commands.run('no-such-command-xyz'), (e) => {
    assert.equal(e.exitCode, 127)
    assert.match(e.stderr, /not found/)
    return true
  })
})

test('stdin: send, then close', async () => {
  const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'hello ')
  await h.sendStdin('stdin\n')
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.stdout, 'hello stdin\ndone\n')
})

test('background, list, connect, kill', async () => {
  const h = await sbx.commands.run('echo started; sleep 120', { background: true, timeoutMs: 0 })
  assert.ok(h.pid > 0)
  const procs = await sbx.commands.list()
  const mine = procs.find((p) => p.pid === h.pid)
  assert.ok(mine, `pid ${h.pid} in ${JSON.stringify(procs)}`)
  assert.deepEqual(mine.args, ['-l', '-c', 'echo started; sleep 120'])
  const other = await sbx.commands.connect(h.pid)
  assert.equal(other.pid, h.pid)
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => {
    assert.equal(e.exitCode, -1)
    assert.match(e.error ?? '', /killed/)
    return true
  })
  assert.equal(await sbx.commands.kill(h.pid), false, 'a dead process is not found')
  assert.equal(await sbx.commands.kill(999999), false)
})

test('pty: create, resize, input, output, exit', async () => {
  let out = ''
  const dec = new TextDecoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
  assert.ok(h.pid > 0)
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; echo mark-$((6*7)); exit\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.match(out, /30 100\r\n/, 'the resize reached the terminal')
  assert.match(out, /mark-42\r\n/)
})
