// files: text, binary, 1 MB, list, mkdir, rename, remove, exists, info,
// relative paths, and the errors the SDK maps.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { FileNotFoundError } from 'e2b'
import { create, killAll } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('text, read back, overwrite, seen by commands', async () => {
  const info = await sbx.files.write('/tmp/t/a.txt', 'hi there')
  assert.equal(info.path, '/tmp/t/a.txt')
  assert.equal(await sbx.files.read('/tmp/t/a.txt'), 'hi there')
  await sbx.files.write('/tmp/t/a.txt', 'short')
  assert.equal(await sbx.files.read('/tmp/t/a.txt'), 'short')
  assert.equal((await sbx.commands.run('cat /tmp/t/a.txt')).stdout, 'short')
  await sbx.files.write('/tmp/t/empty', '')
  assert.equal(await sbx.files.read('/tmp/t/empty'), '')
})

test('binary and 1 MB intact', async () => {
  const all = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write('/tmp/bin', all)
  assert.deepEqual(await sbx.files.read('/tmp/bin', { format: 'bytes' }), all)
  const big = randomBytes(1 << 20)
  await sbx.files.write('/tmp/big', big)
  const back = await sbx.files.read('/tmp/big', { format: 'bytes' })
  assert.equal(back.length, big.length)
  assert.ok(Buffer.from(back).equals(big), '1 MB read back differs')
  assert.equal((await sbx.commands.run('stat -c %s /tmp/big')).stdout, `${1 << 20}\n`)
})

test('write several files at once, relative paths go to home', async () => {
  const infos = await sbx.files.write([{ path: '/tmp/m/1', data: 'one' }, { path: 'rel.txt', data: 'two' }])
  assert.deepEqual(infos.map((i) => i.path), ['/tmp/m/1', '/home/user/rel.txt'])
  assert.equal(await sbx.files.read('/home/user/rel.txt'), 'two')
})

test('list, mkdir, rename, remove, exists, getInfo', async () => {
  assert.equal(await sbx.files.makeDir('/tmp/d/e'), true)
  assert.equal(await sbx.files.makeDir('/tmp/d/e'), false, 'exists already')
  await sbx.files.write('/tmp/d/f.txt', 'x')
  const names = (await sbx.files.list('/tmp/d')).map((e) => `${e.name}:${e.type}`).sort()
  assert.deepEqual(names, ['e:dir', 'f.txt:file'])
  const deep = (await sbx.files.list('/tmp', { depth: 2 })).map((e) => e.path)
  assert.ok(deep.includes('/tmp/d/f.txt'), `depth 2: ${deep}`)
  const moved = await sbx.files.rename('/tmp/d/f.txt', '/tmp/d/g.txt')
  assert.equal(moved.path, '/tmp/d/g.txt')
  assert.equal(await sbx.files.exists('/tmp/d/f.txt'), false)
  assert.equal(await sbx.files.exists('/tmp/d/g.txt'), true)
  const info = await sbx.files.getInfo('/tmp/d/g.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.size, 1)
  assert.equal(info.name, 'g.txt')
  await sbx.files.remove('/tmp/d')
  assert.equal(await sbx.files.exists('/tmp/d'), false)
  await sbx.files.remove('/tmp/d') // a missing path is no error
})

test('errors: missing file, directory', async () => {
  await assert.rejects(sbx.files.read('/tmp/nope'), FileNotFoundError)
  await assert.rejects(sbx.files.getInfo('/tmp/nope'), FileNotFoundError)
  await assert.rejects(sbx.files.list('/tmp/nope'), FileNotFoundError)
  await assert.rejects(sbx.files.rename('/tmp/nope', '/tmp/x'), FileNotFoundError)
  await assert.rejects(sbx.files.read('/tmp'))
})
