package vmm

import (
	"strings"
	"testing"
)

// TestControlGrammar checks the control protocol's replies that need no
// running VM.
func TestControlGrammar(t *testing.T) {
	m := &Machine{done: make(chan struct{}), cfg: MachineConfig{MemBytes: 128 << 20}}
	s := &controlServer{m: m, cfg: &Config{}, stopped: make(chan struct{})}
	for _, tc := range []struct{ in, want string }{
		{"", "err control: empty request"},
		{"bogus", `err control: unknown verb "bogus"`},
		{"status extra", `err status: wrong number of arguments "status extra"`},
		{"save", `err save: wrong number of arguments "save"`},
		{"status", "ok running cpus=0 mem=134217728 pid="},
		{"pause", "err pause: not started"},
		{"resume", "ok"}, // not paused: no-op
		{"save /tmp/x", "err save: machine is not paused"},
		{"x-syscall 39", `err control: unknown verb "x-syscall"`}, // test hooks off
	} {
		got, _ := s.handle(tc.in)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("handle(%q) = %q; want prefix %q", tc.in, got, tc.want)
		}
	}
}
