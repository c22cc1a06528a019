package ctl

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// Plane is the control plane: the registry of sandboxes, their state
// machines and their persisted records under one state directory. All
// methods are safe for concurrent use.
type Plane struct {
	st  *store
	rt  Runtime // may be nil
	log *slog.Logger
	// noRuntime says why rt is nil, for the ENODEV text of creations.
	noRuntime string

	// ctx lives until Close; creation and watcher goroutines use it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // creation and machine-watcher goroutines

	// mu protects the following fields.
	mu    sync.Mutex
	boxes map[string]*Sandbox // every sandbox not removed
	taken map[string]bool     // ids of corrupt records: never reused
	// takenUIDs are the uids that own files in the run directories of
	// corrupt records: never given out (giveUID).
	takenUIDs map[int]bool
	lastErr   string // text of /err
	// snaps are the listed snapshots (snapshots.go); snapBusy the names
	// being taken or removed, and those of corrupt snapshots (never
	// reused); snapPins count the snapshots being taken over or restored
	// from, which rm refuses.
	snaps    map[string]SnapshotInfo
	snapBusy map[string]bool
	snapPins map[string]int
	// snapAt is the newest snapshot's creation time: the next is later
	// (snapTime), so listings and retention follow the order snapshots
	// were taken in even when the wall clock steps back.
	snapAt   time.Time
	watchers map[int]func(id string)
	nextW    int
	closed   bool

	wr worldReg // the worlds (worlds.go), under their own lock

	// retain are the retention rules; retainKick asks their loop for a
	// pass (nil: no loop). retainrules.go.
	retain     Retention
	retainKick chan struct{}
}

// Open opens (creating if needed) the state directory dir, takes its lock
// (EBUSY if another Plane, in this or another process, holds it) and
// loads the recorded sandboxes. Records of sandboxes that were running,
// paused or stopping are re-attached through rt if it implements
// Reattacher; otherwise (and always when they were creating) they come
// back dead with err "daemon restarted" (and the reason, if Reattach
// failed). If rt implements Reaper, machines that no sandbox gets back
// are ended, and run directories no record names are removed
// (restart.go).
// Corrupt records are logged and skipped, never deleted (their ids stay
// taken). rt may be nil: everything works except creating sandboxes,
// which fails with ENODEV. log may be nil (discard).
func Open(dir string, rt Runtime, log *slog.Logger) (*Plane, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	st, err := openStore(dir)
	if err != nil {
		return nil, err
	}
	recs, bad, err := st.load(log)
	if err != nil {
		st.close()
		return nil, err
	}
	snaps, badSnaps, err := st.loadSnaps(log)
	if err != nil {
		st.close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Plane{
		st: st, rt: rt, log: log, ctx: ctx, cancel: cancel,
		boxes:     map[string]*Sandbox{},
		taken:     map[string]bool{},
		takenUIDs: map[int]bool{},
		watchers:  map[int]func(string){},
		snaps:     map[string]SnapshotInfo{},
		snapBusy:  map[string]bool{},
		snapPins:  map[string]int{},
	}
	if err := p.loadWorlds(); err != nil {
		st.close()
		return nil, err
	}
	for _, si := range snaps {
		p.snaps[si.ID] = si
		if si.Created.After(p.snapAt) {
			p.snapAt = si.Created
		}
	}
	for _, id := range badSnaps {
		p.snapBusy[id] = true
	}
	for _, id := range bad {
		p.taken[id] = true
		for _, uid := range st.runDirOwners(id) {
			p.takenUIDs[uid] = true
		}
	}
	for _, r := range recs {
		s := newSandbox(p, r.ID, r.config(), r.Created, r.Owner)
		s.state, s.deadline, s.err, s.uid = r.State, r.Deadline, r.Err, r.UID
		s.disk, s.lastSnap, s.ports = r.Disk, r.LastSnap, r.Ports
		p.boxes[r.ID] = s
	}
	for _, s := range p.Sandboxes() {
		s.restore()
	}
	p.reapStrays()
	p.collectAll()
	return p, nil
}

// Close stops timers and background work and releases the state directory
// lock. Machines are not stopped: a later Open may re-attach them.
// Sandbox handles stay readable; their ctl writes fail with EIO, and
// blocked WaitFrom calls and new/start/kill writes return EIO. Close waits
// for Runtime.Start calls in progress, whose ctx it cancels.
func (p *Plane) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	boxes := p.sortedLocked()
	p.mu.Unlock()
	p.cancel()
	p.closeWorlds()
	for _, s := range boxes {
		// Barrier: an operation in progress finishes before the lock
		// is released; later ones see closed and write nothing.
		s.op.Lock()
		s.mu.Lock()
		if s.timer != nil {
			s.timer.Stop()
		}
		s.mu.Unlock()
		s.op.Unlock()
	}
	p.wg.Wait()
	return p.st.close()
}

func (p *Plane) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

var errClosed = Errorf(syscall.EIO, "ctl: control plane closed")

// Ctl executes one message written to /ctl (GlobalVerbs). reply is what a
// read of the same open file should return next (for new: the id and a
// newline), "" for verbs with nothing to say. A failure's text becomes
// the plane's Err and is logged.
func (p *Plane) Ctl(ctx context.Context, msg []byte) (reply string, err error) {
	reply, err = p.ctl(ctx, msg)
	if err != nil {
		p.fail("", msg, err)
	}
	return reply, err
}

func (p *Plane) ctl(ctx context.Context, m []byte) (string, error) {
	c, v, err := parse(m, GlobalVerbs)
	if err != nil {
		return "", err
	}
	if p.isClosed() {
		return "", errClosed
	}
	return v.Run.plane(p, ctx, c, v)
}

// ctlNew creates and starts a sandbox (new on /ctl); the reply is its id.
// With from=, the snapshot gives its shape and its owner must be the
// writer's.
func (p *Plane) ctlNew(ctx context.Context, c Command, v *Verb) (string, error) {
	if c.Config.From != "" {
		if _, ok := p.rt.(SnapshotRestorer); !ok && p.rt != nil {
			return "", Errorf(syscall.ENOTSUP, "%s: the runtime cannot restore snapshots", v.Name)
		}
		si, err := p.LookupSnapshot(c.Config.From)
		if err != nil {
			return "", errNoSnapshot(v.Name, c.Config.From)
		}
		if err := mayUseSnap(ctx, v.Name, si); err != nil {
			return "", err
		}
		c.Config.Template, c.Config.MemBytes, c.Config.CPUs = si.Template, si.MemBytes, si.CPUs
	}
	s, err := p.create(c.ID, c.Config, c.Verb, cred.Of(ctx).Owner())
	if err != nil {
		return "", err
	}
	if err := s.start(ctx, v, true); err != nil {
		return "", err
	}
	return s.id + "\n", nil
}

func (p *Plane) ctlKill(ctx context.Context, c Command, v *Verb) (string, error) {
	s, err := p.lookup(c.Verb, c.ID)
	if err != nil {
		return "", err
	}
	if err := s.mayControl(ctx, c.Verb); err != nil {
		return "", err
	}
	return "", s.kill(ctx, v)
}

func (p *Plane) ctlRm(ctx context.Context, c Command, v *Verb) (string, error) {
	s, err := p.lookup(c.Verb, c.ID)
	if err != nil {
		return "", err
	}
	if err := s.mayControl(ctx, c.Verb); err != nil {
		return "", err
	}
	return "", s.remove(v)
}

// fail records a failed request's text (in the plane's err, or s's) and
// logs it: unexpected errors (EIO) at error level, the rest at info.
func (p *Plane) fail(id string, m []byte, err error) {
	text := err.Error()
	errno := Errno(err)
	level := slog.LevelInfo
	if errno == syscall.EIO {
		level = slog.LevelError
	}
	p.log.Log(context.Background(), level, "ctl request failed", "sandbox", id, "msg", string(m[:min(len(m), msg.CiteMax)]), "errno", errno.Error(), "err", text)
	if id == "" {
		p.mu.Lock()
		p.lastErr = text
		p.mu.Unlock()
	}
}

// SetErr makes err's text the plane's Err: a failed request the tree
// reports in /err that ctl did not (a write on an open /clone fails in
// the sandbox's err and in /err).
func (p *Plane) SetErr(err error) {
	p.mu.Lock()
	p.lastErr = err.Error()
	p.mu.Unlock()
}

// Err returns the text of the last failed request on /ctl or /clone or a
// snapshot's ctl, "" if none (the content of /err, without newline).
func (p *Plane) Err() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Clone reserves a new sandbox in state new, with a generated id and the
// default config, for an open of /clone; it belongs to ctx's Cred. The handle's writes go to the
// sandbox's Ctl (configure verbs, then start), whose failures go to the
// sandbox's Err like any write to its ctl; call Release when the handle
// is closed. A failure of Clone itself (ENODEV without a runtime) becomes
// the plane's Err.
func (p *Plane) Clone(ctx context.Context) (*Sandbox, error) {
	s, err := p.create("", Config{}, "clone", cred.Of(ctx).Owner())
	if err != nil {
		p.fail("", []byte("clone"), err)
		return nil, err
	}
	return s, nil
}

// SetNoRuntimeReason records why this Plane has no runtime (for example the
// host probe's verdict); creations then fail with ENODEV and that reason.
func (p *Plane) SetNoRuntimeReason(why string) { p.noRuntime = why }

func (p *Plane) noRuntimeErr(verb string) error {
	why := p.noRuntime
	if why == "" {
		why = "sandboxes cannot be created by this daemon"
	}
	return Errorf(syscall.ENODEV, "%s: no VMM runtime configured: %s", verb, why)
}

// create registers a sandbox in state new, called id or a generated id,
// belonging to owner. verb names the request in error texts.
func (p *Plane) create(id string, cfg Config, verb string, owner cred.Owner) (*Sandbox, error) {
	if p.rt == nil {
		// Refuse before anything exists: a sandbox that can never
		// start is not worth reserving.
		return nil, p.noRuntimeErr(verb)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	if id == "" {
		for id == "" || p.boxes[id] != nil || p.taken[id] {
			id = newID()
		}
	} else if p.boxes[id] != nil || p.taken[id] {
		p.mu.Unlock()
		return nil, Errorf(syscall.EEXIST, "%s: sandbox exists %s", verb, msg.Cite(id))
	}
	if err := p.joinGroupLocked(&cfg, verb); err != nil {
		p.mu.Unlock()
		return nil, err
	}
	s := newSandbox(p, id, cfg, time.Now().Round(0), owner) // wall clock only: the order must survive a restart
	p.boxes[id] = s
	p.mu.Unlock()
	p.notify(id)
	return s, nil
}

// idAlphabet gives ids that are valid names and easy to type.
const idAlphabet = "abcdefghijkmnopqrstuvwxyz23456789"

// newID returns a short random id, 8 characters of idAlphabet.
func newID() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// Sandboxes returns the listed sandboxes (every state but removed) in a
// stable order: by creation time, then id.
func (p *Plane) Sandboxes() []*Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sortedLocked()
}

func (p *Plane) sortedLocked() []*Sandbox {
	out := make([]*Sandbox, 0, len(p.boxes))
	for _, s := range p.boxes {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Sandbox) int {
		if c := a.created.Compare(b.created); c != 0 { // immutable
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return out
}

// Lookup returns the sandbox with id, or an ENOENT *Error.
func (p *Plane) Lookup(id string) (*Sandbox, error) {
	return p.lookup("lookup", id)
}

func (p *Plane) lookup(verb, id string) (*Sandbox, error) {
	p.mu.Lock()
	s := p.boxes[id]
	p.mu.Unlock()
	if s == nil {
		return nil, Errorf(syscall.ENOENT, "%s: no sandbox %s", verb, msg.Cite(id))
	}
	return s, nil
}

// unregister drops s from the registry (after rm).
func (p *Plane) unregister(s *Sandbox) {
	p.mu.Lock()
	if p.boxes[s.id] == s {
		delete(p.boxes, s.id)
	}
	p.mu.Unlock()
}

// Watch registers fn to be called after every change of the sandbox list
// or of a sandbox's state (id is the sandbox concerned). fn is called
// without any ctl lock held, from the goroutine that made the change; it
// must not block for long. stop unregisters fn.
func (p *Plane) Watch(fn func(id string)) (stop func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nextW
	p.nextW++
	p.watchers[n] = fn
	return func() {
		p.mu.Lock()
		delete(p.watchers, n)
		p.mu.Unlock()
	}
}

// notify calls the watchers; no lock may be held.
func (p *Plane) notify(id string) {
	p.mu.Lock()
	fns := make([]func(string), 0, len(p.watchers))
	for _, fn := range p.watchers {
		fns = append(fns, fn)
	}
	p.mu.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}

// errText is the text a runtime error leaves in err.
func errText(err error) string {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Text
	}
	return err.Error()
}
