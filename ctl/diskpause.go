package ctl

// Pause to disk: `pause` writes what the paused machine changed since its
// last snapshot or restore (a delta) and its disk layer where its runtime
// keeps them, then ends the machine, so that a paused sandbox holds disk,
// not RAM; `resume` restores it (mapped MAP_PRIVATE, lazily). A machine
// or runtime without DiskPauser/DiskResumer pauses in memory (vCPUs
// parked). A sandbox with a world pauses to disk too: the world's data
// is the daemon's, on disk already; its guest's /workspace is mounted
// again after the resume, as after a rollback. docs/snapshots.md "Pause
// to disk".
//
// Crash order: the image is durable before the record says paused to
// disk, and the machine is killed only after that record; resume records
// running before it starts the new machine, so a daemon killed half-way
// never resumes an image over a disk layer that a later guest changed
// (it re-attaches that machine or declares the sandbox dead).

import (
	"context"
	"errors"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

// DiskPauser is optionally implemented by a Machine that can be paused to
// disk.
type DiskPauser interface {
	// SaveToDisk makes the paused machine's state durable where its
	// runtime can start it again (DiskResumer): its memory as a delta
	// over its last snapshot or restore, its disk layer as it is. The
	// machine stays paused. It returns the image's name, a short line
	// the runtime understands, kept in the sandbox's record.
	SaveToDisk(ctx context.Context) (string, error)
	// Discard ends the machine at once, without an orderly stop (its
	// image is durable), and returns without waiting: Done is closed
	// when it has ended. No other machine starts in the sandbox's
	// directory before that (Sandbox.waitEnding).
	Discard()
}

// DiskResumer is optionally implemented by a Runtime whose machines are
// DiskPausers.
type DiskResumer interface {
	// ResumeFromDisk starts s's machine, running, from image (what
	// SaveToDisk returned for s's last machine), over s.Dir as that
	// machine left it. An error that is an ImageIntactError left the
	// image and disk layer as they were (nothing ran); after any other
	// error the image cannot be trusted.
	ResumeFromDisk(ctx context.Context, s Spec, image string) (Machine, error)
}

// ImageIntactError is a ResumeFromDisk failure before anything ran: the
// sandbox stays paused to disk.
type ImageIntactError struct{ Err error }

func (e *ImageIntactError) Error() string { return e.Err.Error() }
func (e *ImageIntactError) Unwrap() error { return e.Err }

// maxImageLen bounds the image name kept in a record.
const maxImageLen = 1024

// pauseToDisk pauses s (running, its machine's vCPUs already parked) to
// disk, if its machine and runtime can: the image, the record, then the
// machine's end. It reports false when s is to stay paused in memory
// (no support), with err nil. On error the machine is still
// there, paused. op held.
func (s *Sandbox) pauseToDisk(ctx context.Context, verb string) (bool, error) {
	p := s.p
	dp, ok := s.m.(DiskPauser)
	if _, rok := p.rt.(DiskResumer); !ok || !rok {
		return false, nil
	}
	start := time.Now()
	img, err := dp.SaveToDisk(ctx)
	if err == nil && (img == "" || len(img) > maxImageLen) {
		err = Errorf(syscall.EIO, "the runtime gave a bad image name (%d bytes)", len(img))
	}
	if err != nil {
		return false, Errorf(Errno(err), "%s: to disk: %s", verb, errText(err))
	}
	if err := s.persist(verb, StatePaused, func(r *record) { r.Disk = img }); err != nil {
		return false, err
	}
	saved := time.Since(start)
	m := s.m
	s.mu.Lock()
	s.m, s.disk = nil, img // its watcher sees s.m replaced and leaves
	s.mu.Unlock()
	s.ending = m
	// The guest link stays: the resumed guest is the same guest (its
	// agent's processes and slots are in the image), and the tree's
	// nodes under procs/ and fs/ hold it (a FUSE client keeps them).
	// Its sessions are hung up (LinkHanger); it dials again at its next
	// use, which fails with EBUSY until the sandbox runs again.
	m.(DiskPauser).Discard()
	s.hangupLink()
	p.log.Info("sandbox paused to disk", "sandbox", s.id, "image", img, "saved", saved.Round(time.Millisecond),
		"ended", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// resumeFromDisk starts the machine of s, paused to disk, from its image.
// op held.
func (s *Sandbox) resumeFromDisk(ctx context.Context, verb string) error {
	p := s.p
	dr, ok := p.rt.(DiskResumer)
	if !ok {
		return Errorf(syscall.ENOTSUP, "%s: sandbox %s is paused to disk and the runtime cannot resume it", verb, msg.Cite(s.id))
	}
	img := s.disk
	// Recorded running (with the image) before the machine starts: see
	// the package comment above.
	if err := s.persist(verb, StateRunning, func(r *record) { r.Disk = img }); err != nil {
		return err
	}
	start := time.Now()
	s.waitEnding()
	spec := Spec{ID: s.id, Config: s.cfg, Dir: p.st.runDir(s.id), UID: s.uid}
	m, err := dr.ResumeFromDisk(p.ctx, spec, img)
	if err == nil && m == nil {
		err = Errorf(syscall.EIO, "runtime returned no machine")
	}
	if err != nil {
		var intact *ImageIntactError
		if errors.As(err, &intact) {
			if perr := s.persist(verb, StatePaused, func(r *record) { r.Disk = img }); perr != nil {
				p.log.Error("sandbox still paused to disk but its record says running", "sandbox", s.id, "err", perr)
			}
			return Errorf(Errno(err), "%s: %s (sandbox still paused to disk)", verb, errText(err))
		}
		s.die(verb+" from disk: "+errText(err), err)
		return Errorf(Errno(err), "%s: sandbox %s failed to resume from disk: %s", verb, msg.Cite(s.id), errText(err))
	}
	s.mu.Lock()
	s.disk = ""
	s.mu.Unlock()
	s.hangupLink() // anything dialled while it was paused reached nothing
	s.attach(m)
	perr := s.persist(verb, StateRunning, nil)
	s.setState(StateRunning, nil)
	// Its /workspace was on a connection that ended with the old
	// machine: mounted again now, or once the daemon serves worlds.
	s.worldLost()
	s.resumedWorld(ctx)
	p.log.Info("sandbox resumed from disk", "sandbox", s.id, "image", img, "after", time.Since(start).Round(time.Millisecond))
	return perr
}

// LinkHanger is optionally implemented by a guest link (GuestLink): its
// connections to the guest end, and the link dials again at its next use
// (the guest now runs in another machine, restored from disk).
type LinkHanger interface {
	Hangup()
}

// hangupLink hangs up s's guest link, if it has one that can. op held.
func (s *Sandbox) hangupLink() {
	s.mu.Lock()
	l := s.link
	s.mu.Unlock()
	if h, ok := l.(LinkHanger); ok {
		h.Hangup()
	}
}

// waitEnding waits until the machine that s's pause to disk ended has
// ended (its process reaped and its files in the run directory
// removed), before another machine starts there. op held.
func (s *Sandbox) waitEnding() {
	if s.ending != nil {
		<-s.ending.Done()
		s.ending = nil
	}
}

// onDisk reports whether s is paused to disk (no machine). mu or op held.
func (s *Sandbox) onDisk() bool { return s.disk != "" }
