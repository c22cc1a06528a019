// Lifecycle and list: create, info, timeout, connect, list with metadata
// filters and paging, kill, and what the SDK sees of a killed sandbox.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError, AuthenticationError } from 'e2b'
import { create, killAll, runId } from './helpers.mjs'

after(killAll)

test('create, info, setTimeout, connect, kill', async () => {
  const sbx = await create({ metadata: { role: 'main' }, timeoutMs: 120_000 })
  assert.match(sbx.sandboxId, /^[a-z0-9-]+$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.state, 'running')
  assert.equal(info.templateId, 'base')
  assert.equal(info.metadata.role, 'main')
  assert.ok(info.endAt > info.startedAt, 'endAt after startedAt (a timeout was set)')
  assert.equal(await sbx.isRunning(), true)
  await sbx.setTimeout(300_000)
  const metrics = await sbx.getMetrics()
  assert.equal(metrics.length, 1, 'one sample, from the guest\'s /proc')
  const m = metrics[0]
  assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m))
  assert.ok(m.memTotal > 0 && m.memUsed > 0 && m.memUsed < m.memTotal && m.memCache >= 0, JSON.stringify(m))
  assert.ok(Math.abs(m.timestamp.getTime() - Date.now()) < 600_000, 'a timestamp of now')
  assert.ok(m.diskTotal > 0 && m.diskUsed > 0 && m.diskUsed <= m.diskTotal, `disk: ${JSON.stringify(m)}`)
  // Each call adds a sample to the sandbox's history; start and end select.
  await new Promise((r) => setTimeout(r, 1100))
  const all = await sbx.getMetrics({ start: new Date(Date.now() - 3600_000) })
  assert.equal(all.length, 2, `samples since an hour ago: ${JSON.stringify(all)}`)
  assert.ok(all[0].timestamp < all[1].timestamp, 'oldest first')
  const before = await sbx.getMetrics({ end: new Date(m.timestamp.getTime() - 2000) })
  assert.equal(before.length, 0, `samples ending before the first: ${JSON.stringify(before)}`)
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await again.commands.run('echo same')).stdout, 'same\n')
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.kill(), false, 'a second kill finds nothing')
  await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.commands.run('true'))
})

test('list: metadata filters, state, paging', async () => {
  const tag = `${runId}-list`
  const boxes = []
  for (const i of [0, 1, 2]) boxes.push(await create({ metadata: { list: tag, 'k y': 'v&1', n: String(i) } }))
  const all = await Sandbox.list({ query: { metadata: { list: tag } } }).nextItems()
  assert.deepEqual(all.map((s) => s.sandboxId).sort(), boxes.map((b) => b.sandboxId).sort())
  assert.ok(all.every((s) => s.state === 'running' && s.metadata['k y'] === 'v&1'))
  const one = await Sandbox.list({ query: { metadata: { list: tag, n: '1' } } }).nextItems()
  assert.deepEqual(one.map((s) => s.sandboxId), [boxes[1].sandboxId])
  const none = await Sandbox.list({ query: { metadata: { list: tag, n: 'nope' } } }).nextItems()
  assert.equal(none.length, 0)
  const paused = await Sandbox.list({ query: { metadata: { list: tag }, state: ['paused'] } }).nextItems()
  assert.equal(paused.length, 0)
  const pager = Sandbox.list({ query: { metadata: { list: tag } }, limit: 2, order: 'asc' })
  const page1 = await pager.nextItems()
  assert.equal(page1.length, 2)
  assert.equal(pager.hasNext, true)
  const page2 = await pager.nextItems()
  assert.equal(page2.length, 1)
  assert.equal(pager.hasNext, false)
  assert.deepEqual([...page1, ...page2].map((s) => s.sandboxId), boxes.map((b) => b.sandboxId), 'asc: creation order')
})

test('a wrong API key is refused', async () => {
  await assert.rejects(Sandbox.list({ apiKey: 'not-the-key-0000000000' }).nextItems(), AuthenticationError)
})
