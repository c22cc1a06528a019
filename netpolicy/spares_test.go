package netpolicy

import (
	"os"
	"testing"
	"time"

	"sandfs/test/testenv"
)

// TestSpares: spares are loaded ahead and replaced as they are taken; a
// Take with none ready loads one itself; a taken spare is a working
// filter; Close frees every spare, those loading when it came too (no
// descriptor is left).
func TestSpares(t *testing.T) {
	testenv.NeedRoot(t)
	fds := openFDs(t)
	s, err := NewSpares(2)
	must(t, err)
	waitReady := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if ready, _, _ := s.Stats(); ready == want {
				return
			}
			if time.Now().After(deadline) {
				ready, _, _ := s.Stats()
				t.Fatalf("%d spares ready after 30 s; want %d", ready, want)
			}
		}
	}
	waitReady(2)
	a, err := s.Take()
	must(t, err)
	b, err := s.Take()
	must(t, err)
	c, err := s.Take() // none ready: loaded here
	must(t, err)
	if _, _, taken := s.Stats(); taken != 2 {
		t.Errorf("taken %d; want 2 (the third Take loads its own)", taken)
	}
	for _, f := range []*Filter{a, b, c} {
		must(t, f.Set(mustParse(t, "allow 10.1.0.0/16\n")))
		if n, err := f.Counters(); err != nil || len(n) != int(countMax) {
			t.Errorf("a taken filter's counters: %v, %v", n, err)
		}
		must(t, f.Close())
	}
	// Close while the replacements load: they are freed as they finish.
	s.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, loading, _ := s.Stats()
		if loading == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d loads still under way 30 s after Close", loading)
		}
	}
	if f, err := s.Take(); err != nil {
		t.Errorf("Take after Close: %v; want a filter loaded then", err)
	} else {
		f.Close()
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after Close; %d before NewSpares", n, fds)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(ents)
}
