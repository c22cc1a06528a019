// The SDK side of test/e2b/bench.sh: the operations treebench times in
// the tree, through the E2B SDK (create, commands.run('true'), files.write
// and files.read of 1 MiB, kill); prints "sdk <op> <median ms>".
import { Sandbox } from 'e2b'
import { randomBytes } from 'node:crypto'

const n = Number(process.env.BENCH_N ?? 5)
const times = { create: [], run: [], write1M: [], read1M: [], kill: [] }
const data = randomBytes(1 << 20)
async function timed(op, fn) {
  const t = performance.now()
  const r = await fn()
  times[op].push(performance.now() - t)
  return r
}
for (let i = 0; i < n; i++) {
  const sbx = await timed('create', () => Sandbox.create('base'))
  await timed('run', () => sbx.commands.run('true'))
  await timed('write1M', () => sbx.files.write('/tmp/big', data))
  const back = await timed('read1M', () => sbx.files.read('/tmp/big', { format: 'bytes' }))
  if (!Buffer.from(back).equals(data)) throw new Error('1 MiB read back differs')
  await timed('kill', () => sbx.kill())
}
for (const [op, ts] of Object.entries(times)) {
  ts.sort((a, b) => a - b)
  console.log(`sdk ${op} ${ts[Math.floor(ts.length / 2)].toFixed(1)}`)
}
