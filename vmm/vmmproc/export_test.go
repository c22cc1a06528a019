package vmmproc

import (
	"net"
	"testing"
)

// For the external test package (jail_lab_test.go), which drives VMMs
// through ctl's runtime.

// AttackID is the sandbox id that makes this test binary, run as a VMM,
// attack once confined (attack_test.go).
const AttackID = attackID

// WaitLog waits for vmm.log's lines (waitLog).
func WaitLog(path string, want ...string) string { return waitLog(path, want...) }

// SnapshotTree records what is under dir (snapshotTree).
func SnapshotTree(t *testing.T, dir string) map[string]string { return snapshotTree(t, dir) }

// CheckAttacks asserts that the attacker whose config is cfg and whose
// stderr is out was refused everything and disturbed nothing under base
// (checkAttacks).
func CheckAttacks(t *testing.T, out string, cfg *Config, lns []net.Listener, before map[string]string, base string) {
	t.Helper()
	checkAttacks(t, out, cfg, lns, before, base, true)
}

// Attach is a client of the control socket of a VMM that ctl's runtime
// started (its Process is the runtime's); its session ends with t.
func Attach(t *testing.T, socket string) *Process {
	p := &Process{cfg: Config{Socket: socket}, done: make(chan struct{}), exited: make(chan struct{})}
	p.sess = newSession(socket, p.check)
	t.Cleanup(p.sess.close)
	return p
}
