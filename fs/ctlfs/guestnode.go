package ctlfs

import (
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	sfs "sandfs/fs"
	"sandfs/fs/ninep"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl"
)

// guestDir serves a directory of a sandbox's guest agent, bound into the
// sandbox's directory: /sandboxes/<id>/procs/ and /sandboxes/<id>/fs/
// (top: the bind point itself) and every directory under them. The
// bind point's Stat answers without the guest, so that listing a
// sandbox never waits for it; its first Lookup or List dials the agent.
//
//	$ ls /n/sandfs/sandboxes/t/procs
//	1  3  clone
//
// Symbolic links under fs/ are followed, within the guest's root (the
// node model has no links): fs/bin is the directory the guest's /bin
// points to.
type guestDir struct {
	g     *guestLink
	names []string      // path from the agent's root, e.g. ["fs", "etc"]
	mode  iofs.FileMode // top only
	top   bool
	attr  onceAttr
}

// guestFile serves a file of a guest agent's tree (see guestDir).
type guestFile struct {
	g     *guestLink
	names []string
	attr  onceAttr
}

var (
	_ sfs.Dir       = (*guestDir)(nil)
	_ sfs.Creator   = (*guestDir)(nil)
	_ sfs.Mkdirer   = (*guestDir)(nil)
	_ sfs.Remover   = (*guestDir)(nil)
	_ sfs.Opener    = (*guestFile)(nil)
	_ sfs.Truncater = (*guestFile)(nil)
)

// newGuestBind returns the bind point of the agent's directory name
// ("procs" or "fs") for sandbox sb.
func newGuestBind(sb *ctl.Sandbox, name string, mode iofs.FileMode) sfs.Node {
	return &guestDir{g: linkOf(sb), names: []string{name}, mode: mode, top: true}
}

// onceAttr is the attributes found by the Lookup that made a node: the
// Stat that adapters make right after a Lookup uses them instead of
// asking the guest again; later Stats ask.
type onceAttr struct {
	used atomic.Bool
	set  bool // a holds the lookup's attributes; immutable after the node is made
	a    sfs.Attr
}

func (o *onceAttr) take() (sfs.Attr, bool) {
	if !o.set || o.used.Swap(true) {
		return sfs.Attr{}, false
	}
	return o.a, true
}

func guestPath(names []string) string { return strings.Join(names, "/") }

// stat walks names on s and returns their attributes (the fid is clunked).
func (g *guestLink) stat(ctx context.Context, s *guestSession, names []string) (p9.Attr, error) {
	var a p9.Attr
	err := g.do(ctx, s, "walk "+guestPath(names), true, nil, func() error {
		_, f, _, at, err := s.root.WalkGetAttr(names)
		if err != nil {
			return err
		}
		a = at
		return f.Close()
	})
	return a, err
}

// readlink returns the target of the symlink at names.
func (g *guestLink) readlink(ctx context.Context, s *guestSession, names []string) (string, error) {
	var t string
	err := g.do(ctx, s, "readlink "+guestPath(names), true, nil, func() error {
		_, f, err := s.root.Walk(names)
		if err != nil {
			return err
		}
		defer f.Close()
		t, err = f.Readlink()
		return err
	})
	return t, err
}

// resolveLink returns the path that the symlink at names, whose text is
// target, points to, kept inside fs/ (".." stops at fs/).
func resolveLink(names []string, target string) []string {
	var out []string
	if strings.HasPrefix(target, "/") {
		out = []string{names[0]}
	} else {
		out = append(out, names[:len(names)-1]...)
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

// maxLinks bounds symlink resolution, as the kernel's MAXSYMLINKS.
const maxLinks = 40

// lookup returns the node at names, following symlinks under fs/.
func (g *guestLink) lookup(ctx context.Context, names []string) (sfs.Node, error) {
	s, err := g.shared(ctx)
	if err != nil {
		return nil, err
	}
	for hops := 0; ; hops++ {
		a, err := g.stat(ctx, s, names)
		if err != nil {
			return nil, err
		}
		if a.Mode.IsSymlink() && names[0] == "fs" {
			if hops == maxLinks {
				return nil, syscall.ELOOP
			}
			t, err := g.readlink(ctx, s, names)
			if err != nil {
				return nil, err
			}
			names = resolveLink(names, t)
			continue
		}
		if a.Mode.IsDir() {
			d := &guestDir{g: g, names: names}
			d.attr.a, d.attr.set = ninep.FromP9Attr(a), true
			return d, nil
		}
		f := &guestFile{g: g, names: names}
		f.attr.a, f.attr.set = ninep.FromP9Attr(a), true
		return f, nil
	}
}

// Stat implements fs.Node.Stat.
func (d *guestDir) Stat(ctx context.Context) (sfs.Attr, error) {
	if d.top {
		return sfs.Attr{Mode: iofs.ModeDir | d.mode.Perm()}, nil
	}
	if a, ok := d.attr.take(); ok {
		return a, nil
	}
	return d.g.statNode(ctx, d.names)
}

func (g *guestLink) statNode(ctx context.Context, names []string) (sfs.Attr, error) {
	s, err := g.shared(ctx)
	if err != nil {
		return sfs.Attr{}, err
	}
	a, err := g.stat(ctx, s, names)
	if err != nil {
		return sfs.Attr{}, err
	}
	return ninep.FromP9Attr(a), nil
}

// Lookup implements fs.Dir.Lookup.
func (d *guestDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	return d.g.lookup(ctx, append(append([]string(nil), d.names...), name))
}

// List implements fs.Dir.List.
func (d *guestDir) List(ctx context.Context) ([]sfs.Dirent, error) {
	s, err := d.g.shared(ctx)
	if err != nil {
		return nil, err
	}
	var out []sfs.Dirent
	err = d.g.do(ctx, s, "readdir "+guestPath(d.names), true, nil, func() error {
		_, f, err := s.root.Walk(d.names)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			return err
		}
		out, err = ninep.ListP9(f, 1<<16)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Create implements fs.Creator: a new file in the guest, owned by root.
func (d *guestDir) Create(ctx context.Context, name string, flags sfs.OpenFlags, perm iofs.FileMode) (sfs.Node, sfs.Handle, error) {
	names := append(append([]string(nil), d.names...), name)
	where := guestPath(names)
	s, err := d.g.shared(ctx)
	if err != nil {
		return nil, nil, err
	}
	var f p9.File
	err = d.g.do(ctx, s, "create "+where, true, nil, func() error {
		_, dir, err := s.root.Walk(d.names)
		if err != nil {
			return err
		}
		// The directory's fid becomes the new, open file (Tlcreate).
		f, _, _, err = dir.Create(name, p9.OpenFlags(flags)&p9.OpenFlagsModeMask, p9.FileMode(perm.Perm()), 0, 0)
		if err != nil {
			dir.Close()
		}
		return err
	})
	if err != nil {
		return nil, nil, d.g.failed("create "+where, err, "")
	}
	h := &guestHandle{g: d.g, names: names, flags: flags, s: s, f: f}
	return &guestFile{g: d.g, names: names}, h, nil
}

// Mkdir implements fs.Mkdirer.
func (d *guestDir) Mkdir(ctx context.Context, name string, perm iofs.FileMode) (sfs.Node, error) {
	names := append(append([]string(nil), d.names...), name)
	where := guestPath(names)
	s, err := d.g.shared(ctx)
	if err != nil {
		return nil, err
	}
	err = d.g.do(ctx, s, "mkdir "+where, true, nil, func() error {
		_, dir, err := s.root.Walk(d.names)
		if err != nil {
			return err
		}
		defer dir.Close()
		_, err = dir.Mkdir(name, p9.FileMode(perm.Perm()), 0, 0)
		return err
	})
	if err != nil {
		return nil, d.g.failed("mkdir "+where, err, "")
	}
	return &guestDir{g: d.g, names: names}, nil
}

// Remove implements fs.Remover: unlink a file or remove an empty directory.
func (d *guestDir) Remove(ctx context.Context, name string, dir bool) error {
	where := guestPath(append(append([]string(nil), d.names...), name))
	s, err := d.g.shared(ctx)
	if err != nil {
		return err
	}
	var flags uint32
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	err = d.g.do(ctx, s, "remove "+where, true, nil, func() error {
		_, f, err := s.root.Walk(d.names)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.UnlinkAt(name, flags)
	})
	if err != nil {
		return d.g.failed("remove "+where, err, "")
	}
	return nil
}

// Stat implements fs.Node.Stat.
func (f *guestFile) Stat(ctx context.Context) (sfs.Attr, error) {
	if a, ok := f.attr.take(); ok {
		return a, nil
	}
	return f.g.statNode(ctx, f.names)
}

// Truncate implements fs.Truncater for files under fs/. Under procs/ (the
// agent's message and stream files) truncation to 0, which `echo msg >
// file` asks for, is ignored, and any other size is EPERM.
func (f *guestFile) Truncate(ctx context.Context, size int64) error {
	if f.names[0] != "fs" {
		if size == 0 {
			return nil
		}
		return syscall.EPERM
	}
	where := guestPath(f.names)
	s, err := f.g.shared(ctx)
	if err != nil {
		return err
	}
	err = f.g.do(ctx, s, "truncate "+where, true, nil, func() error {
		_, fl, err := s.root.Walk(f.names)
		if err != nil {
			return err
		}
		defer fl.Close()
		return fl.SetAttr(p9.SetAttrMask{Size: true}, p9.SetAttr{Size: uint64(size)})
	})
	if err != nil {
		return f.g.failed("truncate "+where, err, "")
	}
	return nil
}

// isStream reports whether the agent's file at names is a blocking one
// (procs/<n>/stdout, stderr, wait), which gets a private session.
func isStream(names []string) bool {
	if len(names) != 3 || names[0] != "procs" {
		return false
	}
	switch names[2] {
	case "stdout", "stderr", "wait":
		return true
	}
	return false
}

// Open implements fs.Opener.
func (f *guestFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	h := &guestHandle{g: f.g, names: f.names, flags: flags & syscall.O_ACCMODE, private: isStream(f.names)}
	h.clone = len(f.names) == 2 && f.names[0] == "procs" && f.names[1] == "clone"
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.openLocked(ctx); err != nil {
		if flags.Writable() {
			return nil, f.g.failed("open "+guestPath(f.names), err, "")
		}
		return nil, err
	}
	return h, nil
}

// guestHandle is one open file of the agent's tree, with its own fid on
// the shared session, or on a private one for streams. If its session
// dies, the next request opens the file again (except procs/clone, whose
// open is the slot: that fails with EIO).
type guestHandle struct {
	g       *guestLink
	names   []string
	flags   sfs.OpenFlags
	private bool // a stream: own session, killed on interrupt
	clone   bool // procs/clone

	mu sync.Mutex    // protects s, f
	s  *guestSession // the session f belongs to
	f  p9.File       // nil: closed, or dropped after an interrupt

	reading atomic.Int32 // reads in flight (a private session with one cannot be reused)
}

var _ sfs.Handle = (*guestHandle)(nil)

func (h *guestHandle) openLocked(ctx context.Context) error {
	var s *guestSession
	var err error
	if h.private {
		s, err = h.g.private(ctx)
	} else {
		s, err = h.g.shared(ctx)
	}
	if err != nil {
		return err
	}
	var f p9.File
	err = h.g.do(ctx, s, "open "+guestPath(h.names), true, nil, func() error {
		_, fl, err := s.root.Walk(h.names)
		if err != nil {
			return err
		}
		if _, _, err := fl.Open(p9.OpenFlags(h.flags) & p9.OpenFlagsModeMask); err != nil {
			fl.Close()
			return err
		}
		f = fl
		return nil
	})
	if err != nil {
		if h.private {
			s.kill(errors.New("open failed"))
		}
		return err
	}
	h.s, h.f = s, f
	return nil
}

var errHandleLost = ctl.Errorf(syscall.EIO, "procs/clone: the guest connection was lost; the slot is gone with it")

// file returns the open fid, opening the file again if it was dropped.
func (h *guestHandle) file(ctx context.Context) (*guestSession, p9.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f != nil && !h.s.isDead() {
		return h.s, h.f, nil
	}
	if h.clone {
		return nil, nil, errHandleLost
	}
	if h.f != nil && h.private {
		h.s.kill(nil)
	}
	h.f = nil
	if err := h.openLocked(ctx); err != nil {
		return nil, nil, err
	}
	return h.s, h.f, nil
}

// drop forgets fid f after an interrupted request; a private session is
// closed, which ends the request in the agent.
func (h *guestHandle) drop(s *guestSession, f p9.File) {
	h.mu.Lock()
	if h.f == f {
		h.f = nil
	}
	h.mu.Unlock()
	if h.private {
		s.kill(errors.New("interrupted"))
	} else {
		go f.Close()
	}
}

// Read implements fs.Handle.Read. A stream read blocks until the agent has
// data, the stream ends (EOF) or ctx ends (EINTR; the private connection
// is closed, so output the agent had already taken for this read is
// lost, and the next read opens the stream again).
func (h *guestHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	s, f, err := h.file(ctx)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, min(len(p), guestReadMax)) // an abandoned read may still fill it
	// n is read only when do returns fn's own result (err nil or EOF);
	// an abandoned fn may still write it.
	var n int
	h.reading.Add(1)
	err = h.g.do(ctx, s, "read "+guestPath(h.names), false, func() { h.drop(s, f) }, func() error {
		defer h.reading.Add(-1)
		var err error
		n, err = ninep.ReadP9(f, buf, off)
		return err
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	copy(p, buf[:n])
	return n, nil
}

// Write implements fs.Handle.Write. A failed write to a ctl file (procs/clone,
// procs/<n>/ctl) gets the agent's err text; every failed write leaves
// its text in the sandbox's err.
func (h *guestHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	s, f, err := h.file(ctx)
	if err != nil {
		return 0, err
	}
	where := guestPath(h.names)
	var n int
	err = h.g.do(ctx, s, "write "+where, false, func() { h.drop(s, f) }, func() error {
		var err error
		n, err = ninep.WriteP9(f, p, off)
		return err
	})
	if err == nil {
		return n, nil
	}
	text := ""
	if en, ok := err.(syscall.Errno); ok && h.names[0] == "procs" {
		slot := ""
		switch {
		case h.clone:
			slot = h.slot(ctx, s, f)
			where = "procs/" + slot + "/ctl"
		case len(h.names) == 3 && h.names[2] == "ctl":
			slot = h.names[1]
		}
		if slot != "" {
			text = h.g.guestErrText(ctx, s, slot)
		}
		if text == "" {
			text = en.Error()
		}
	}
	return 0, h.g.failed(where, err, text)
}

// slot reads the slot number of an open procs/clone ("?" if it cannot).
func (h *guestHandle) slot(ctx context.Context, s *guestSession, f p9.File) string {
	var n string
	if err := h.g.do(ctx, s, "read procs/clone", true, nil, func() error {
		var err error
		n, err = readSlot(f)
		return err
	}); err != nil {
		return "?"
	}
	return n
}

// Close implements fs.Handle.Close.
func (h *guestHandle) Close() error {
	h.mu.Lock()
	s, f := h.s, h.f
	h.f = nil
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	if h.private {
		// A read still blocked in the agent ends only with its
		// connection; otherwise clunk and keep the session for reuse.
		if h.reading.Load() > 0 {
			s.kill(errors.New("closed"))
			return nil
		}
		if err := h.g.do(context.Background(), s, "clunk "+guestPath(h.names), true, nil, f.Close); err != nil {
			s.kill(err)
			return nil
		}
		h.g.release(s)
		return nil
	}
	return h.g.do(context.Background(), s, "clunk "+guestPath(h.names), true, nil, f.Close)
}
