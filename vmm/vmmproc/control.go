package vmmproc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/fs"
	"sandfs/fs/ninep"
	"sandfs/snapshot"
	"sandfs/vmm"
	"sandfs/vmm/virtio/blk"
)

// control is the VMM's control, served as a small file tree over 9P
// (package fs's node model, fs/ninep's server) on the control socket:
//
//	/ctl       ctlFile     write: one verb (controlVerbs); read: "<id> <state>"
//	/status    statusFile  "<state> cpus=<n> mem=<bytes> pid=<pid> tracking=<t>"
//	/err       errFile     the text of the last failed ctl write
//
// A failed write returns the verb's errno (9P2000.L Rlerror carries no
// more) and leaves its text, `verb: reason`, in err, so the client gets
// both (Process.request).
type control struct {
	m   machine
	cfg *Config
	log *slog.Logger

	mu      sync.Mutex // protects lastErr
	lastErr string     // text of the last failed ctl write

	stopOnce sync.Once
	stopped  chan struct{} // closed once a stop request has been applied
}

// machine is what the control drives: a *vmm.Machine (a fake in tests).
type machine interface {
	Pause() error
	Resume() error
	Paused() bool
	SaveDir(dir string) error
	Snapshot(dir, parent string) (*snapshot.Snapshot, error)
	// SaveToDisk is Snapshot without re-arming dirty-page tracking
	// (vmm.Machine.SnapshotToEnd), then SyncDisks: a pause to disk.
	SaveToDisk(dir, parent string) (*snapshot.Snapshot, error)
	DirtyTracking() string
	Stop()
	Exit() (vmm.ExitReason, error)
	CPUs() int
	MemBytes() uint64
	// CloneDisk copies disk n's private copy-on-write state to dst
	// (blk.COW.Clone); paused only.
	CloneDisk(n int, dst string) error
	// SyncDisks makes every copy-on-write layer durable as it is
	// (blk.COW.Sync: the overlay fsynced, its map written); paused only.
	SyncDisks() error
}

var _ machine = diskMachine{}

// diskMachine is the machine the control drives: the vmm.Machine and the
// copy-on-write disks addDevices opened (nil for a disk without an
// overlay), by their index in Config.Disks.
type diskMachine struct {
	*vmm.Machine
	disks []*blk.COW
}

// CloneDisk implements machine.CloneDisk.
func (m diskMachine) CloneDisk(n int, dst string) error {
	if !m.Paused() {
		return fmt.Errorf("clonedisk: %w", vmm.ErrNotPaused)
	}
	if n < 0 || n >= len(m.disks) || m.disks[n] == nil {
		return msg.Errorf(unix.EINVAL, "clonedisk: disk %d is not a copy-on-write disk", n)
	}
	return m.disks[n].Clone(dst)
}

// Snapshot implements machine.Snapshot: the memory snapshot
// (vmm.Machine.Snapshot), with every copy-on-write disk's sync started
// first (blk.COW.StartSync), so that the snapshot's fsync commits the
// disks' blocks too: the syncdisks (pause to disk) or clonedisk
// (snapshot) after it in the same pause then wait for no commit of
// their own but the map's rename (docs/snapshots.md "Pause to disk").
func (m diskMachine) Snapshot(dir, parent string) (*snapshot.Snapshot, error) {
	if err := m.startSync(); err != nil {
		return nil, err
	}
	return m.Machine.Snapshot(dir, parent)
}

// SaveToDisk implements machine.SaveToDisk: as Snapshot, the disks'
// sync started first so that the snapshot's fsync commits their blocks.
func (m diskMachine) SaveToDisk(dir, parent string) (*snapshot.Snapshot, error) {
	if err := m.startSync(); err != nil {
		return nil, err
	}
	s, err := m.Machine.SnapshotToEnd(dir, parent)
	if err != nil {
		return nil, err
	}
	return s, m.SyncDisks()
}

// startSync starts every copy-on-write disk's sync (paused only).
func (m diskMachine) startSync() error {
	if !m.Paused() {
		return fmt.Errorf("snapshot: %w", vmm.ErrNotPaused)
	}
	for i, d := range m.disks {
		if d == nil {
			continue
		}
		if err := d.StartSync(); err != nil {
			return fmt.Errorf("snapshot: disk %d: %w", i, err)
		}
	}
	return nil
}

// SyncDisks implements machine.SyncDisks.
func (m diskMachine) SyncDisks() error {
	if !m.Paused() {
		return fmt.Errorf("syncdisks: %w", vmm.ErrNotPaused)
	}
	for i, d := range m.disks {
		if d == nil {
			continue
		}
		if err := d.Sync(); err != nil {
			return fmt.Errorf("syncdisks: disk %d: %w", i, err)
		}
	}
	return nil
}

func newControl(m machine, cfg *Config, log *slog.Logger) *control {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &control{m: m, cfg: cfg, log: log, stopped: make(chan struct{})}
}

// controlTable is the control tree's root directory.
var controlTable = fs.Table[*control]{
	{Name: "ctl", Mode: 0o600, New: ctlFile},
	{Name: "status", Mode: 0o444, New: statusFile},
	{Name: "err", Mode: 0o444, New: errFile},
}

// root is the control tree. It shows no owner: the 9P server gives it
// the process's own uid, and the daemon (root) connects.
func (c *control) root() fs.Dir { return controlTable.Dir(c, 0o555, nil) }

// state is "running", "paused" or "ended:<reason>".
func (c *control) state() string {
	if r, _ := c.m.Exit(); r != vmm.ExitRunning {
		return "ended:" + string(r)
	}
	if c.m.Paused() {
		return "paused"
	}
	return "running"
}

// controlVerb is the handler of a ctl message.
type controlVerb func(c *control, a []string) error

// controlVerbs are the ctl verbs (docs/vmm.md, "Control").
var controlVerbs = msg.Table[controlVerb, msg.Stateless]{
	{Name: "pause", Usage: "pause", Run: (*control).pause,
		Doc: "park the vCPUs outside KVM_RUN and quiesce the devices; EBUSY if not started."},
	{Name: "resume", Usage: "resume", Run: (*control).resume,
		Doc: "run the vCPUs again (nothing if not paused)."},
	{Name: "save", Usage: "save <dir>", Min: 1, Max: 1, Run: (*control).save,
		Doc: "paused only (EBUSY otherwise): write the full snapshot <dir> (meta and mem; an empty <dir> is replaced)."},
	{Name: "snapshot", Usage: "snapshot <dir> [<parent>]", Min: 1, Max: 2, Run: (*control).snapshot,
		Doc: "paused only (EBUSY otherwise): write the snapshot <dir> (which must not exist; its directory is created), atomically: full, or with <parent> (a sibling of <dir>: the machine's last snapshot or the one it was restored from, or an ancestor of that one, folding the snapshots between) a delta of the pages dirtied since; written full when the chain is due for compaction."},
	{Name: "clonedisk", Usage: "clonedisk <n> <dst>", Min: 2, Max: 2, Run: (*control).cloneDisk,
		Doc: "paused only (EBUSY otherwise): copy disk n's copy-on-write layer (Config.Disks[n].Overlay) to <dst> and <dst>.map, as the disk is now (a reflink where the file system has one, else the written chunks); <dst>'s directory is created; the machine goes on with its own layer."},
	{Name: "syncdisks", Usage: "syncdisks", Run: (*control).syncDisks,
		Doc: "paused only (EBUSY otherwise): fsync every disk's copy-on-write layer and write its map, so that the layers on disk match a snapshot taken in the same pause (a pause to disk: the process is then killed, not stopped)."},
	{Name: "savetodisk", Usage: "savetodisk <dir> [<parent>]", Min: 1, Max: 2, Run: (*control).saveToDisk,
		Doc: "paused only (EBUSY otherwise): a pause to disk in one request: snapshot <dir> [<parent>] without re-arming dirty-page tracking (the machine is to end; should it go on, its next delta is larger), then syncdisks."},
	{Name: "stop", Usage: "stop", Run: (*control).stop,
		Doc: "stop the machine; the process then exits with status 0."},
}

// testVerbs are controlVerbs and, with Config.TestHooks, the x- verbs
// tests use.
var testVerbs = append(controlVerbs[:len(controlVerbs):len(controlVerbs)],
	msg.Verb[controlVerb, msg.Stateless]{Name: "x-syscall", Usage: "x-syscall <nr>", Min: 1, Max: 1, Run: (*control).xSyscall,
		Doc: "make syscall nr with zero arguments (to test the seccomp filter); fails with its errno, if any."},
)

// message parses and applies one ctl message. A failure is a *msg.Error
// whose text starts with the verb; it is also kept for err.
func (c *control) message(m []byte) error {
	verbs := controlVerbs
	if c.cfg.TestHooks {
		verbs = testVerbs
	}
	call, err := verbs.Parse(msg.Rules{}, m)
	if err == nil {
		err = msg.Prefix(call.Verb.Name, call.Verb.Run(c, call.Args))
	}
	if err != nil {
		c.mu.Lock()
		c.lastErr = err.Error()
		c.mu.Unlock()
		c.log.Info("vmm: control", "err", err.Error())
	}
	return err
}

func (c *control) pause([]string) error     { return c.m.Pause() }
func (c *control) resume([]string) error    { return c.m.Resume() }
func (c *control) save(a []string) error    { return c.m.SaveDir(a[0]) }
func (c *control) syncDisks([]string) error { return c.m.SyncDisks() }

// snapshot creates dir's store (as the VMM's own uid: in the jail, only
// inside Jail.Work) and writes the snapshot (vmm.Machine.Snapshot).
func (c *control) snapshot(a []string) error { return c.writeSnapshot(a, c.m.Snapshot) }

// saveToDisk is snapshot by machine.SaveToDisk.
func (c *control) saveToDisk(a []string) error { return c.writeSnapshot(a, c.m.SaveToDisk) }

// writeSnapshot checks the arguments <dir> [<parent>], creates dir's
// store and writes the snapshot with take.
func (c *control) writeSnapshot(a []string, take func(dir, parent string) (*snapshot.Snapshot, error)) error {
	dir, parent := a[0], ""
	if len(a) == 2 {
		parent = a[1]
	}
	for _, p := range a {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return msg.Errorf(unix.EINVAL, "%s is not an absolute, clean path", msg.Cite(p))
		}
	}
	if parent != "" && filepath.Dir(parent) != filepath.Dir(dir) {
		return msg.Errorf(unix.EINVAL, "parent %s is not beside %s", msg.Cite(parent), msg.Cite(dir))
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	s, err := take(dir, parent)
	if s != nil {
		// Where the time went (snapshot.Timing), for docs/snapshots.md's
		// breakdown and the benchmark (SnapshotPhases).
		c.log.Info("vmm: snapshot", "dir", dir, "pages", s.Pages(), "phases", s.Took.String())
	}
	return err
}

// cloneDisk creates dst's directory (as the VMM's own uid: in the jail,
// only inside Jail.Work) and clones the disk there.
func (c *control) cloneDisk(a []string) error {
	n, err := strconv.Atoi(a[0])
	if err != nil || n < 0 || n >= len(c.cfg.Disks) {
		return msg.Errorf(unix.EINVAL, "clonedisk: no disk %s", msg.Cite(a[0]))
	}
	dst := a[1]
	if !filepath.IsAbs(dst) || filepath.Clean(dst) != dst {
		return msg.Errorf(unix.EINVAL, "clonedisk: %s is not an absolute, clean path", msg.Cite(dst))
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("clonedisk: %w", err)
	}
	return c.m.CloneDisk(n, dst)
}

// stop marks the control stopped before it stops the machine: the
// process, seeing the machine end, then waits for this write's reply.
func (c *control) stop([]string) error {
	c.stopOnce.Do(func() { close(c.stopped) })
	c.m.Stop()
	return nil
}

func (c *control) xSyscall(a []string) error {
	var nr uintptr
	if _, err := fmt.Sscan(a[0], &nr); err != nil {
		return msg.Errorf(unix.EINVAL, "x-syscall: bad number %s", msg.Cite(a[0]))
	}
	if _, _, e := unix.Syscall(nr, 0, 0, 0); e != 0 {
		return msg.Errorf(e, "x-syscall: %d: %v", nr, e)
	}
	return nil
}

// serve serves the control tree on ln until ctx is done, one 9P session
// per connection (ServeConn: every request is checked as the peer's
// SO_PEERCRED; the socket lies in root's 0700 run directory, so the
// daemon is the only peer). The wait it returns is for the end of a
// stopped machine: it returns once every client has hung up (the daemon
// does once its stop write is answered), or after a second.
func (c *control) serve(ctx context.Context, ln net.Listener) (wait func()) {
	srv := ninep.NewServer(c.root(), c.log)
	var conns connSet
	context.AfterFunc(ctx, func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.add(1)
			go func() {
				defer conns.add(-1)
				srv.ServeConn(ctx, nc, "")
			}()
		}
	}()
	return func() {
		select {
		case <-conns.none():
		case <-time.After(time.Second):
		}
	}
}

// connSet counts the open control connections.
type connSet struct {
	mu   sync.Mutex    // protects the fields below
	n    int           // open connections
	zero chan struct{} // closed when n drops to 0; nil: nobody waits
}

func (s *connSet) add(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += d
	if s.n == 0 && s.zero != nil {
		close(s.zero)
		s.zero = nil
	}
}

// none returns a channel closed once no connection is open.
func (s *connSet) none() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if s.zero == nil {
		s.zero = make(chan struct{})
	}
	return s.zero
}
