package ctlfs

import "testing"

func TestIsStdin(t *testing.T) {
	for p, want := range map[string]bool{
		"sandboxes/b1/procs/3/stdin":    true,
		"sandboxes/b1/procs/3/stdout":   false,
		"sandboxes/b1/procs/clone":      false,
		"sandboxes/b1/ctl":              false,
		"procs/3/stdin":                 false, // the agent's tree, not the daemon's
		"sandboxes/b1/fs/procs/3/stdin": false,
	} {
		if got := IsStdin(p); got != want {
			t.Errorf("IsStdin(%q) = %v; want %v", p, got, want)
		}
	}
	if !isStdin("procs/3/stdin") || isStdin("procs/3/ctl") {
		t.Error("isStdin: the agent's procs/<n>/stdin only")
	}
}
