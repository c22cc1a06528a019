package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRaiseFileLimit: as root, the bound becomes the kernel's most,
// soft and hard; as anyone, soft reaches hard. A host whose root lacks
// CAP_SYS_RESOURCE (this kind's container) checks only the second: the
// first is checked in the lab, on the daemon's log (test/guestlab
// TestWorldOpenBound).
func TestRaiseFileLimit(t *testing.T) {
	n, err := raiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur != r.Max || r.Cur != n {
		t.Errorf("limit %d soft, %d hard, %d returned; want all the same", r.Cur, r.Max, n)
	}
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		t.Fatal(err)
	}
	most, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if mayRaise(t) && r.Max != most {
		t.Errorf("with CAP_SYS_RESOURCE: hard limit %d; want fs.nr_open, %d", r.Max, most)
	}
	t.Logf("open files limit %d (fs.nr_open %d, CAP_SYS_RESOURCE %v)", r.Max, most, mayRaise(t))
}

// mayRaise reports whether this process may raise its hard limits: it
// holds CAP_SYS_RESOURCE (a container may withhold it from root).
func mayRaise(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
