package ctl

// clone on sandboxes/<id>/ctl: a snapshot, then n sandboxes restored
// from it, at most c at a time; all or nothing.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// Bounds of clone.
const (
	MaxClones          = 64
	DefaultConcurrency = 4
	MaxConcurrency     = 16
)

// The verbs clone acts with on the sandboxes it makes, for their
// preconditions and error texts.
var (
	cloneStart = &Verb{Name: "clone", Needs: []State{StateNew}}
	cloneKill  = &Verb{Name: "clone"}
	cloneRm    = &Verb{Name: "clone", Needs: []State{StateDead, StateNew}}
)

// checkClone validates clone [n] [concurrency=c].
func checkClone(c *Command) error {
	c.Count, c.Concurrency = 1, 0
	if len(c.Args) == 1 {
		n, err := strconv.Atoi(c.Args[0])
		if err != nil || n < 1 || n > MaxClones || c.Args[0][0] == '+' {
			return Errorf(syscall.EINVAL, "%s: invalid count %s (want 1..%d)", c.Verb, msg.Cite(c.Args[0]), MaxClones)
		}
		c.Count = n
	}
	if v, ok := c.Keys["concurrency"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxConcurrency || v[0] == '+' {
			return Errorf(syscall.EINVAL, "%s: invalid concurrency %s (want 1..%d)", c.Verb, msg.Cite("concurrency="+v), MaxConcurrency)
		}
		c.Concurrency = n
	}
	if c.Concurrency == 0 {
		c.Concurrency = min(c.Count, DefaultConcurrency)
	}
	return nil
}

// clone takes a snapshot of s and makes c.Count sandboxes from it (new
// from=), c.Concurrency at a time. The reply is their ids, one a line.
// If any fails, every one made is killed and removed, and so is the
// snapshot.
func (s *Sandbox) clone(ctx context.Context, c Command, v *Verb) (string, error) {
	p := s.p
	if _, ok := p.rt.(SnapshotRestorer); !ok {
		return "", Errorf(syscall.ENOTSUP, "%s: the runtime cannot restore snapshots", v.Name)
	}
	s.op.Lock()
	if !v.Allows(s.state) {
		err := s.busy(v)
		s.op.Unlock()
		return "", err
	}
	snap, err := s.snapshotLocked(ctx, v.Name, "")
	cfg := s.cfg.Defaults()
	s.op.Unlock()
	p.notify(s.id)
	if err != nil {
		return "", err
	}
	cfg.From = snap
	made, err := p.cloneFrom(ctx, cfg, c.Count, c.Concurrency, s.owner)
	if err != nil {
		for _, cb := range made {
			rerr := cb.kill(context.Background(), cloneKill)
			// A clone whose start failed before it ran is still new,
			// and kill removes such a sandbox.
			if rerr == nil && cb.State() != StateRemoved {
				rerr = cb.remove(cloneRm)
			}
			if rerr == nil {
				rerr = p.dropFork(cb)
			}
			if rerr != nil {
				p.log.Error("clone: cannot remove a clone of a failed clone", "sandbox", cb.id, "err", rerr)
			}
		}
		if rerr := p.dropSnap(snap); rerr != nil {
			p.log.Error("clone: cannot remove the snapshot of a failed clone", "snapshot", snap, "err", rerr)
		}
		return "", Errorf(Errno(err), "%s: %s (every clone made and the snapshot %s are removed)", v.Name, errText(err), msg.Cite(snap))
	}
	var b strings.Builder
	for _, cb := range made {
		b.WriteString(cb.id)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// cloneFrom creates n sandboxes of cfg for owner, conc at a time, and
// returns them in order; on the first failure it starts no more and
// returns it, with every sandbox it made (some may still be creating).
func (p *Plane) cloneFrom(ctx context.Context, cfg Config, n, conc int, owner cred.Owner) ([]*Sandbox, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	made := make([]*Sandbox, n)
	var (
		mu    sync.Mutex // protects first
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, conc)
	for i := range n {
		sem <- struct{}{}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cb, err := p.create("", cfg, "clone", owner)
			if err == nil {
				made[i] = cb
				err = cb.start(ctx, cloneStart, false)
				if err != nil {
					err = Errorf(Errno(err), "clone %d of %d: %s", i+1, n, strings.TrimPrefix(errText(err), "clone: "))
				}
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	var out []*Sandbox
	for _, cb := range made {
		if cb != nil {
			out = append(out, cb)
		}
	}
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return out, first
}
