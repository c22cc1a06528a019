package ctl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestConcurrentClients runs creators, killers, crashers and readers at
// once (run it with -race). Requests may fail only with the errnos of a
// lost race (EBUSY, ENOENT, EEXIST, ECANCELED for a new killed while
// creating, or EIO from a machine that crashed under a pause); afterwards the listing and the records on disk agree.
func TestConcurrentClients(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	const workers, rounds = 4, 15
	ids := func(w, i int) string { return fmt.Sprintf("w%d-%d", w, i) }
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	check := func(what string, err error) {
		switch Errno(err) {
		case 0, syscall.EBUSY, syscall.ENOENT, syscall.EEXIST, syscall.EIO, syscall.ECANCELED:
		default:
			errs <- fmt.Errorf("%s: %v (%v)", what, err, Errno(err))
		}
	}
	bg := context.Background()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				id := ids(w, i)
				_, err := p.Ctl(bg, []byte("new "+id+" timeout=1h"))
				check("new "+id, err)
				if s, err := p.Lookup(id); err == nil {
					for _, m := range []string{"pause", "resume", "timeout 30m", "pause", "kill"} {
						check(id+" "+m, s.Ctl(bg, []byte(m)))
					}
				}
				if i%3 == 0 {
					_, err = p.Ctl(bg, []byte("rm "+id))
					check("rm "+id, err)
				}
				c, err := p.Clone(bg)
				check("clone", err)
				if err == nil {
					check("clone cpus", c.Ctl(bg, []byte("cpus 2")))
					if i%2 == 0 {
						check("clone start", c.Ctl(bg, []byte("start")))
					}
					c.Release()
				}
			}
		}()
	}
	stop := make(chan struct{})
	var bgwg sync.WaitGroup
	// A killer and a crasher aiming at random sandboxes.
	bgwg.Add(2)
	go func() {
		defer bgwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := p.Ctl(bg, []byte(fmt.Sprintf("kill %s", ids(rand.IntN(workers), rand.IntN(rounds)))))
			check("random kill", err)
			time.Sleep(time.Millisecond)
		}
	}()
	go func() {
		defer bgwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m := rt.machine(ids(rand.IntN(workers), rand.IntN(rounds))); m != nil {
				m.crash(errors.New("vmm: random crash"))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// Readers.
	for range 2 {
		bgwg.Add(1)
		go func() {
			defer bgwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, s := range p.Sandboxes() {
					_ = s.Status() + s.Err()
					c, cancel := context.WithTimeout(bg, time.Millisecond)
					s.Wait(c)
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bgwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every listed sandbox has settled (nothing stuck in creating or
	// stopping) and a restart sees the same records.
	var before []string
	for _, s := range p.Sandboxes() {
		st := s.State()
		if st != StateDead && st != StateRunning {
			t.Errorf("%s left in state %s", s.ID(), st)
		}
		before = append(before, s.ID())
	}
	p.Close()
	p2, _ := openPlane(t, dir, nil)
	var after []string
	for _, s := range p2.Sandboxes() {
		after = append(after, s.ID())
		if s.State() != StateDead {
			t.Errorf("%s after restart: %s; want dead", s.ID(), s.State())
		}
	}
	if !slices.Equal(before, after) {
		t.Errorf("listing before restart %v\nafter %v", before, after)
	}
}
