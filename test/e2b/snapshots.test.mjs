// pause and connect, snapshots (create, list, a sandbox from one,
// delete) and fork: the tree's pause/resume, snapshot, new from= and
// clone.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { create, killAll, track } from './helpers.mjs'

after(killAll)

test('pause, then connect resumes with memory and files intact', async () => {
  const sbx = await create()
  await sbx.commands.run('echo kept > /tmp/f; echo 41 > /dev/shm/n')
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false, 'already paused')
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await sbx.isRunning(), false)
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await again.getInfo()).state, 'running')
  assert.equal((await again.commands.run('cat /tmp/f /dev/shm/n')).stdout, 'kept\n41\n')
})

test('snapshot, list, a sandbox from it, delete; fork', async () => {
  const sbx = await create()
  await sbx.commands.run('echo before > /tmp/f')
  const snap = await sbx.createSnapshot()
  assert.match(snap.snapshotId, /^[a-z0-9-]+$/)
  const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
  assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
  await sbx.commands.run('echo after > /tmp/f')
  const child = track(await Sandbox.create(snap.snapshotId))
  assert.notEqual(child.sandboxId, sbx.sandboxId)
  assert.equal((await child.commands.run('cat /tmp/f')).stdout, 'before\n')
  assert.equal((await sbx.commands.run('cat /tmp/f')).stdout, 'after\n')
  const forks = await Sandbox.fork(sbx.sandboxId, { count: 2 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(!(f instanceof Error), String(f))
    track(f)
    assert.equal((await f.commands.run('cat /tmp/f')).stdout, 'after\n')
  }
  await child.kill()
  await Promise.all(forks.map((f) => f.kill()))
  await sbx.kill()
  // fork's clone took a snapshot too, a delta over ours: newest first.
  const all = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
  assert.equal(all.length, 2)
  for (const s of all.reverse()) assert.equal(await Sandbox.deleteSnapshot(s.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'deleted already')
})
