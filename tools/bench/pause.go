package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"sandfs/snapshot"
)

// pauseResult holds the pause/resume figures.
type pauseResult struct {
	conc                 int
	create               time.Duration // wall: conc sandboxes restored at once, each to its agent
	pause1, resume1      sample        // one sandbox's vCPUs, c=1
	pauseC, resumeC      time.Duration // wall: conc sandboxes at once
	diskPause, fullPause sample        // pause+delta+syncdisks+SIGKILL vs pause+full snapshot+syncdisks+SIGKILL, one per pair
	diskBytes, fullBytes int64
	diskResume           time.Duration // restore from the delta to the agent answering
	diskPhases           string        // the VMM's breakdown of the two snapshots (snapshot.Timing)
	fullPhases           string
	useC                 memUse // one idle sandbox while all conc are alive
}

// parallel runs f(i) for i < n at once and returns the wall time and the
// first error.
func parallel(n int, f func(i int) error) (time.Duration, error) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = f(i) }(i)
	}
	wg.Wait()
	d := since(start)
	for _, err := range errs {
		if err != nil {
			return d, err
		}
	}
	return d, nil
}

// benchPause restores conc sandboxes of t at once, pauses and resumes one
// (n times) and then all of them at once; then pauses one to disk (only
// the pages dirtied since its restore, then the process ends) and another
// with a full memory snapshot, and resumes the first from its delta.
func (r *run) benchPause(ctx context.Context, t *template, conc int) (*pauseResult, error) {
	res := &pauseResult{conc: conc}
	sbs := make([]*sandbox, conc)
	defer func() {
		for _, s := range sbs {
			if s != nil {
				s.close()
			}
		}
	}()
	var err error
	res.create, err = parallel(conc, func(i int) (err error) {
		sbs[i], _, err = r.h.restore(ctx, t.dir, t.mem, t.snap())
		return err
	})
	if err != nil {
		return nil, err
	}
	r.progress("  %d restores at once: %s", conc, ms(res.create))
	time.Sleep(r.idle)
	if res.useC, err = readMemUse(sbs[0].p.Pid(), filepath.Join(t.snap(), snapshot.MemFile)); err != nil {
		return nil, err
	}
	for i := 0; i < r.n; i++ {
		start := now()
		if err := sbs[0].p.Pause(ctx); err != nil {
			return nil, err
		}
		res.pause1 = append(res.pause1, since(start))
		start = now()
		if err := sbs[0].p.Resume(ctx); err != nil {
			return nil, err
		}
		res.resume1 = append(res.resume1, since(start))
	}
	if res.pauseC, err = parallel(conc, func(i int) error { return sbs[i].p.Pause(ctx) }); err != nil {
		return nil, err
	}
	if res.resumeC, err = parallel(conc, func(i int) error { return sbs[i].p.Resume(ctx) }); err != nil {
		return nil, err
	}
	r.progress("  pause/resume c=1 %s/%s, c=%d %s/%s", ms(res.pause1.median()), ms(res.resume1.median()), conc, ms(res.pauseC), ms(res.resumeC))
	if conc < 2 {
		return res, nil
	}
	return res, r.pauseToDisk(ctx, t, sbs, res)
}

// pauseToDisk pauses pairs of sbs to disk, as the daemon's pause to disk
// ends a VMM (syncdisks, SIGKILL): in each pair the first with a delta
// over its template snapshot, the second with a full snapshot (the
// order alternating from pair to pair), min(n, len(sbs)/2) pairs; then
// it restores the first pair's first from its delta.
func (r *run) pauseToDisk(ctx context.Context, t *template, sbs []*sandbox, res *pauseResult) error {
	pairs := min(r.n, len(sbs)/2)
	var first string
	for k := 0; k < pairs; k++ {
		a, b := sbs[2*k], sbs[2*k+1]
		order := []bool{true, false}
		if k%2 == 1 {
			order = []bool{false, true}
		}
		for _, delta := range order {
			s, parent := b, ""
			if delta {
				s, parent = a, t.snap()
			}
			d, size, dir, split, err := r.stopToDisk(ctx, t, s, parent)
			if err != nil {
				return fmt.Errorf("pause to disk (delta %v): %w", delta, err)
			}
			if delta {
				res.diskPause, res.diskBytes, res.diskPhases = append(res.diskPause, d), size, split
				if first == "" {
					first = dir
				}
			} else {
				res.fullPause, res.fullBytes, res.fullPhases = append(res.fullPause, d), size, split
			}
		}
	}
	s, ph, err := r.h.restore(ctx, sbs[0].dir, t.mem, first)
	if err != nil {
		return fmt.Errorf("resume from disk: %w", err)
	}
	s.close()
	res.diskResume = ph.total()
	r.progress("  pause to disk %s (%s; %s), full-memory pause %s (%s; %s), resume from disk %s",
		res.diskPause.spread(), mib(res.diskBytes), res.diskPhases, res.fullPause.spread(), mib(res.fullBytes), res.fullPhases, ms(res.diskResume))
	return nil
}

// stopToDisk pauses s, has it write a snapshot over parent ("": full)
// into t's store, syncs its disks and SIGKILLs it; it returns the time
// to SIGKILL sent, the snapshot's bytes and directory, and where the
// time went.
func (r *run) stopToDisk(ctx context.Context, t *template, s *sandbox, parent string) (time.Duration, int64, string, string, error) {
	dir := filepath.Join(t.store, "p"+strconv.FormatInt(r.h.seq.Add(1), 10))
	start := now()
	if err := s.p.Pause(ctx); err != nil {
		return 0, 0, "", "", err
	}
	ps := now()
	// As the daemon's pause to disk (ctl/vmmpause.go): the memory and the
	// disk layer made durable in one request, then SIGKILL (no orderly
	// stop).
	if err := s.p.SaveToDisk(ctx, dir, parent); err != nil {
		return 0, 0, "", "", err
	}
	sd := now()
	s.p.Abort() // as vmmMachine.Discard: SIGKILL, no wait
	d := since(start)
	<-s.p.Done()
	split := fmt.Sprintf("pause %s, savetodisk verb (snapshot, syncdisks) %s, SIGKILL sent (not counted: reaped %s later); in the verb: %s",
		ms(span(start, ps)), ms(span(ps, sd)), ms(since(sd)), s.snapshotPhases(dir))
	sn, err := snapshot.Open(dir)
	if err != nil {
		return 0, 0, "", "", err
	}
	return d, int64(sn.Pages() * snapshot.PageSize), dir, split, nil
}

// pauseTable is the pause/resume table.
func pauseTable(p *pauseResult, mem uint64) *table {
	t := &table{title: fmt.Sprintf("Pause and resume (VMM process, %d MiB guests)", mem>>20),
		head: []string{"operation", "c=1 (median)", fmt.Sprintf("c=%d (wall)", p.conc)}}
	t.add("create from snapshot (to agent answering)", "see above", ms(p.create))
	t.add("pause (vCPUs stopped, memory kept)", ms(p.pause1.median()), ms(p.pauseC))
	t.add("resume (vCPUs running)", ms(p.resume1.median()), ms(p.resumeC))
	u := p.useC
	t.notes = append(t.notes, fmt.Sprintf("With the %d sandboxes alive and idle, one VMM's **PSS beyond guest RAM + private guest pages: %s** (its binary %s, anonymous %s; private beyond guest RAM + private guest pages %s).",
		p.conc, kib(u.beyond()), kib(u.binPSS), kib(u.anonPSS), kib(u.uss)))
	if len(p.diskPause) > 0 {
		t.add("pause to disk: pages dirtied since restore, disk layer synced, SIGKILL sent ("+mib(p.diskBytes)+")", ms(p.diskPause.median()), "")
		t.add("full-memory pause: full snapshot, disk layer synced, SIGKILL sent ("+mib(p.fullBytes)+")", ms(p.fullPause.median()), "")
		t.add("resume from disk: restore the delta to agent answering", ms(p.diskResume), "")
		t.notes = append(t.notes, fmt.Sprintf("**pause to disk / full-memory pause = %s** (medians of %d each, alternating; target ≤ 0.10). Samples: pause to disk %s, full %s.",
			ratio(p.diskPause.median(), p.fullPause.median()), len(p.diskPause), p.diskPause.spread(), p.fullPause.spread()),
			"Where the time went (the last of each): pause to disk: "+p.diskPhases+". Full-memory pause: "+p.fullPhases+".")
	}
	return t
}
