package vmm

import (
	"strings"
	"testing"
)

// TestInterruptState: the dump's interrupt section reads each vCPU's
// LAPIC, events and MSRs on its own thread, from a running machine
// (KVM_RUN left and re-entered) and from a paused one, and the guest runs
// on after it.
func TestInterruptState(t *testing.T) {
	con := &console{}
	m := newTestMachine(t, 2, "ticks", con, "")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	con.waitFor(t, m, "tick 2\r\n", bootTimeout)
	check := func(when string) {
		t.Helper()
		s := m.StallReport()
		for _, want := range []string{"ioapic: irr=", "pic master: ", "vcpu 0: rip=", "vcpu 1: rip=", "lapic: tpr=", "events: ", "msrs: tsc=0x", "regs: rax=", "gs: cpl="} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: interrupt state lacks %q:\n%s", when, want, s)
			}
		}
		if strings.Contains(s, "no answer") || strings.Contains(s, "=?") || strings.Contains(s, foreignState) {
			t.Errorf("%s: interrupt state incomplete:\n%s", when, s)
		}
		t.Logf("%s:\n%s", when, s)
	}
	check("running")
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	check("paused")
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	before := countTicks(con.String())
	con.waitFor(t, m, "tick "+itoa(before+1)+"\r\n", bootTimeout) // ticks count from 0
}
