// files: text, binary, 1 MB, list, mkdir, rename, remove, exists, info, watch,
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

// waitFor polls cond every 100 ms, up to 60 s (a loaded lab is slow).
async function waitFor(cond) {
  for (let i = 0; i < 600 && !cond(); i++) await new Promise((r) => setTimeout(r, 100))
  return cond()
}

test('watchDir: create, write, remove; recursive; stop; errors', async () => {
  await sbx.files.makeDir('/tmp/w/sub')
  const events = []
  const h = await sbx.files.watchDir('/tmp/w', (e) => { events.push(e) }, { recursive: true, timeoutMs: 0 })
  await sbx.files.write('/tmp/w/a.txt', 'x')
  // As root: the files API made /tmp/w as root.
  await sbx.commands.run('echo y >> /tmp/w/sub/b.txt; rm /tmp/w/a.txt; mkdir /tmp/w/new; touch /tmp/w/new/c', { user: 'root' })
  const want = [['a.txt', 'create'], ['a.txt', 'write'], ['a.txt', 'remove'], ['sub/b.txt', 'create'],
    ['sub/b.txt', 'write'], ['new', 'create'], ['new/c', 'create']]
  const has = (evs, [n, t]) => evs.some((e) => e.name === n && e.type === t)
  assert.ok(await waitFor(() => want.every((w) => has(events, w))), `events: ${JSON.stringify(events)}`)
  await h.stop()
  const n = events.length
  await sbx.files.write('/tmp/w/after-stop', 'x')
  await new Promise((r) => setTimeout(r, 1000))
  assert.equal(events.length, n, `events after stop: ${JSON.stringify(events.slice(n))}`)

  // Not recursive. (includeEntry the SDK refuses below envd 0.6.3, which
  // the adapter does not claim: docs/e2b.md.)
  const flat = []
  const h2 = await sbx.files.watchDir('/tmp/w', (e) => { flat.push(e) }, { timeoutMs: 0 })
  await sbx.files.write('/tmp/w/sub/deep', 'x')
  await sbx.files.write('/tmp/w/top', 'zz')
  assert.ok(await waitFor(() => has(flat, ['top', 'write'])), `events: ${JSON.stringify(flat)}`)
  assert.ok(!flat.some((e) => e.name.startsWith('sub/')), `a flat watch saw ${JSON.stringify(flat)}`)
  await h2.stop()

  await assert.rejects(sbx.files.watchDir('/tmp/nosuch', () => {}))
  await assert.rejects(sbx.files.watchDir('/tmp/w/top', () => {}))
})

// The polling watcher RPCs the Python SDK's watch_dir uses, through the
// JS SDK's own Connect client of the filesystem service (its rpc field).
test('CreateWatcher, GetWatcherEvents, RemoveWatcher', async () => {
  await sbx.files.makeDir('/tmp/pw')
  const rpc = sbx.files.rpc
  const { watcherId } = await rpc.createWatcher({ path: '/tmp/pw', recursive: true })
  assert.ok(watcherId, 'a watcher id')
  await sbx.files.write('/tmp/pw/x', 'x')
  const got = []
  const wrote = () => got.some((e) => e.name === 'x' && e.type === 2) // EVENT_TYPE_WRITE
  for (let i = 0; i < 120 && !wrote(); i++) {
    got.push(...(await rpc.getWatcherEvents({ watcherId })).events)
    if (!wrote()) await new Promise((r) => setTimeout(r, 500))
  }
  assert.ok(wrote(), `events: ${JSON.stringify(got)}`)
  assert.ok(got.some((e) => e.name === 'x' && e.type === 1), `a create (1) before the write (2): ${JSON.stringify(got)}`)
  await rpc.removeWatcher({ watcherId })
  await assert.rejects(rpc.getWatcherEvents({ watcherId }), /not.found|not_found/i)
  await assert.rejects(rpc.removeWatcher({ watcherId }))
})
