// Shared setup of the E2B SDK tests: the SDK reads E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY (set by run.sh); every sandbox a test
// makes is tagged with this run's id and killed at the end.
import { Sandbox } from 'e2b'

export const runId = `run-${process.pid}-${Date.now()}`
const made = []

// create makes a sandbox tagged with the run id (and more metadata).
export async function create(opts = {}) {
  const sbx = await Sandbox.create('base', {
    requestTimeoutMs: 180_000, // a boot in a loaded lab, nested under emulation
    ...opts,
    metadata: { suite: runId, ...(opts.metadata ?? {}) },
  })
  made.push(sbx)
  return sbx
}

// track adds a sandbox made otherwise (from a snapshot, a fork) to
// those killAll kills.
export function track(sbx) {
  made.push(sbx)
  return sbx
}

// killAll kills what create made (a sandbox already killed answers false).
export async function killAll() {
  await Promise.all(made.splice(0).map((s) => s.kill().catch(() => {})))
}
