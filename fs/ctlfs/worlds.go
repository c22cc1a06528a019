package ctlfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"

	"sandfs/ctl"
	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
	sfs "sandfs/fs"
	"sandfs/fs/ninep"
	"sandfs/guest"
	"sandfs/world"
)

// worldsDir serves /worlds/ (every world: one directory per world, by
// name) and /sandboxes/<id>/worlds/ (sb set: the world attached to that
// sandbox, the same directory). Anyone who may list it sees the names; a
// world's own directory is its owner's alone (0500).
type worldsDir struct {
	p    *ctl.Plane
	sb   *ctl.Sandbox // nil: every world
	mode iofs.FileMode
}

var _ sfs.Dir = (*worldsDir)(nil)

// Stat implements fs.Node.Stat.
func (d *worldsDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | d.mode.Perm()}, nil
}

// Lookup implements fs.Dir.Lookup.
func (d *worldsDir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if d.sb != nil && d.sb.Config().World != name {
		return nil, ctl.Errorf(syscall.ENOENT, "lookup: no world %s attached to sandbox %s", msg.Cite(name), msg.Cite(d.sb.ID()))
	}
	wi, err := d.p.LookupWorld(name)
	if err != nil {
		return nil, err
	}
	o := wi.Owner
	return worldTable.Dir(worldNode{d.p, wi}, 0o500, &o), nil
}

// List implements fs.Dir.List.
func (d *worldsDir) List(context.Context) ([]sfs.Dirent, error) {
	wis := d.p.Worlds()
	if d.sb != nil {
		wis = slices.DeleteFunc(wis, func(wi ctl.WorldInfo) bool { return wi.Name != d.sb.Config().World })
	}
	out := make([]sfs.Dirent, len(wis))
	for i, wi := range wis {
		out[i] = sfs.Dirent{Name: wi.Name, Mode: iofs.ModeDir}
	}
	return out, nil
}

// worldNode is the value a world's directory serves.
type worldNode struct {
	p  *ctl.Plane
	wi ctl.WorldInfo
}

// worldTable is a world's directory, /worlds/<w>/, owned by the world's
// creator and closed to others (0500). Its fs/ and upper/ show the
// files' own owners and modes, under that closed directory.
var worldTable = sfs.Table[worldNode]{
	{Name: "ctl", Mode: 0o600, New: worldCtlFile},
	{Name: "lower", Mode: 0o400, New: worldLowerFile},
	{Name: "fs", Mode: iofs.ModeDir | 0o755, New: worldFSDir},
	{Name: "upper", Mode: iofs.ModeDir | 0o500, New: worldUpperDir},
	{Name: "diff", Mode: 0o400, New: worldDiffFile},
	{Name: "status", Mode: 0o400, New: worldStatusFile},
}

// worldCtlFile serves <w>/ctl: a write is one verb (ctl.WorldVerbs:
// apply [force], discard, rebase, rm), whose failure's text goes to
// /err; a read gives the reply of the last write on the open (rebase:
// how many changes it dropped), or before any the world's name:
//
//	w1
func worldCtlFile(n worldNode, mode iofs.FileMode) sfs.Node {
	return &worldCtl{n: n, mode: mode}
}

type worldCtl struct {
	n    worldNode
	mode iofs.FileMode
}

var _ sfs.Opener = (*worldCtl)(nil)

// Stat implements fs.Node.Stat.
func (f *worldCtl) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open: the handle keeps the last reply.
func (f *worldCtl) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	n := f.n
	return newReplyHandle(func(ctx context.Context, m []byte) (string, bool, error) {
		reply, err := n.p.WorldCtl(ctx, n.wi.Name, m) // a failure's text goes to /err
		return reply, reply != "", err
	}, func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(n.wi.Name + "\n")
		return nil
	}), nil
}

// worldLowerFile serves <w>/lower, the host path of the lower:
//
//	/home/alice/project
func worldLowerFile(n worldNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(n.wi.Lower + "\n")
		return nil
	}}
}

// worldDiffFile serves <w>/diff, the world's changes, one a line,
// sorted by path (docs/worlds.md):
//
//	deleted del.txt
//	modified dir/b.txt
//	added new.txt
func worldDiffFile(n worldNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		wb, err := n.p.World(n.wi.Name)
		if err != nil {
			return err
		}
		d, err := wb.Diff()
		b.WriteString(d)
		return err
	}}
}

// worldStatusFile serves <w>/status, one line in fixed field order (new
// fields only at the end): ctl.WorldInfo.Line, then the world's own
// (changes, copy-ups under way: bytes done/total):
//
//	w1 mode=overlay owner=1000 created=1764423000 lower=/home/alice/project changes=3 copying=0/0 copied=1/5 copytime=0ms
func worldStatusFile(n worldNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		wb, err := n.p.World(n.wi.Name)
		if err != nil {
			return err
		}
		b.WriteString(n.wi.Line() + " " + wb.Status() + "\n")
		return nil
	}}
}

// worldUpperDir serves <w>/upper/, the world's changes as a plain
// read-only directory (world.World.UpperView), whiteouts included. An
// unsafe-rw world's is empty.
func worldUpperDir(n worldNode, mode iofs.FileMode) sfs.Node {
	return worldDir(n, mode, func(w *world.World) (sfs.Dir, error) {
		d, err := w.UpperView()
		if errors.Is(err, syscall.ENOENT) {
			return sfs.EmptyDir{Mode: mode}, nil // unsafe-rw: no upper
		}
		return d, err
	})
}

// worldFSDir serves <w>/fs/, the world itself: the union of its lower
// and its upper (package world), read and write, each file showing its
// own owner and mode (the guest mounts the same nodes at /workspace).
func worldFSDir(n worldNode, mode iofs.FileMode) sfs.Node {
	return worldDir(n, mode, (*world.World).Root)
}

// worldDir is the directory dir gives of n's world (empty for a world
// that is not a package world union); an error is the node's.
func worldDir(n worldNode, mode iofs.FileMode, dir func(*world.World) (sfs.Dir, error)) sfs.Node {
	wb, err := n.p.World(n.wi.Name)
	if err != nil {
		return errNode{err}
	}
	b, ok := wb.(*worldBackend)
	if !ok {
		return sfs.EmptyDir{Mode: mode}
	}
	d, err := dir(b.w)
	if err != nil {
		return errNode{err}
	}
	return d
}

// errNode is a node that cannot be reached: its Stat fails with err.
type errNode struct{ err error }

// Stat implements fs.Node.Stat.
func (e errNode) Stat(context.Context) (sfs.Attr, error) { return sfs.Attr{}, e.err }

// OpenWorld is the daemon's ctl.WorldOpener: package world's union; an
// unsafe-rw world writes as its owner (their uid and gid; World.WriteAs).
// A guest's connection to it holds at most the 9P server's default of
// open files (4096); WorldOpener sets another.
func OpenWorld(lower, dir, mode string, owner cred.Owner) (ctl.WorldBackend, error) {
	return openWorld(lower, dir, mode, owner, 0)
}

// WorldOpener is OpenWorld with a guest's connection to a world bounded
// to guestOpens open files (ninep.Server.SetOpenBound; 0: the default),
// the daemon's --guest-open-files. A bound out of range is an error.
func WorldOpener(guestOpens int) (ctl.WorldOpener, error) {
	if guestOpens < 0 || guestOpens > ninep.MaxOpenBound {
		return nil, fmt.Errorf("guest open files %d: want 1-%d (0: the default)", guestOpens, ninep.MaxOpenBound)
	}
	return func(lower, dir, mode string, owner cred.Owner) (ctl.WorldBackend, error) {
		return openWorld(lower, dir, mode, owner, guestOpens)
	}, nil
}

func openWorld(lower, dir, mode string, owner cred.Owner, guestOpens int) (ctl.WorldBackend, error) {
	m, err := world.ParseMode(mode)
	if err != nil {
		return nil, err
	}
	w, err := world.Open(lower, dir, m)
	if err != nil {
		return nil, err
	}
	if err := w.WriteAs(cred.Cred{UID: owner.UID, GID: owner.GID}); err != nil {
		w.Close()
		return nil, err
	}
	return &worldBackend{w: w, guestOpens: guestOpens}, nil
}

// worldBackend is a world's data for ctl: package world's World.
type worldBackend struct {
	w          *world.World
	guestOpens int // open files a guest's connection may hold; 0: ninep's default
}

var _ ctl.WorldBackend = (*worldBackend)(nil)

// Diff implements ctl.WorldBackend.Diff.
func (b *worldBackend) Diff() (string, error) {
	chs, err := b.w.Diff()
	var s strings.Builder
	for _, c := range chs {
		s.WriteString(c.String())
		s.WriteByte('\n')
	}
	return s.String(), err
}

// Apply implements ctl.WorldBackend.Apply.
func (b *worldBackend) Apply(force bool, as cred.Cred) error { return b.w.ApplyAs(force, as) }

// Discard implements ctl.WorldBackend.Discard.
func (b *worldBackend) Discard() error { return b.w.Discard() }

// Rebase implements ctl.WorldBackend.Rebase.
func (b *worldBackend) Rebase() (int, error) { return b.w.Rebase() }

// Save implements ctl.WorldBackend.Save: how many files were cloned
// (copy-on-write) and copied, and their bytes.
func (b *worldBackend) Save(dir string) (string, error) {
	st, err := b.w.Save(dir)
	return fmt.Sprintf("cloned=%d copied=%d bytes=%d", st.Cloned, st.Copied, st.Bytes), err
}

// Restore implements ctl.WorldBackend.Restore.
func (b *worldBackend) Restore(dir string) error { return b.w.Restore(dir) }

// Status implements ctl.WorldBackend.Status.
func (b *worldBackend) Status() string {
	s, err := b.w.Status()
	if err != nil {
		return "changes=? copying=0/0 copied=0/0 copytime=0ms"
	}
	return s
}

// ServeConn implements ctl.WorldBackend.ServeConn: the union's root
// served by a 9P server of its own, as who, to who's guest: who's files
// show as the guest user's (guest.User), anyone else's as nobody
// (ninep.IDMap), so the guest's default user owns /workspace whoever
// owns the sandbox on the host. Its iounit is 0, so the
// guest's 9p client reads and writes msize at a time (500 KiB over
// virtio-9p): with the control tree's 64 KiB, a 16 MiB read was 279
// requests where 33 do (test/guestlab BenchmarkWorldHops).
func (b *worldBackend) ServeConn(ctx context.Context, c net.Conn, who cred.Cred, log *slog.Logger) {
	root, err := b.w.Root()
	if err != nil {
		c.Close()
		return
	}
	srv := ninep.NewServer(root, log)
	srv.SetIOUnit(0)
	srv.SetPassReads(true)
	srv.SetPassFiles(true)   // its VMM reads, writes and syncs open files itself
	srv.SetOrderClunks(true) // its clunks close the world's files: its VMM answers them itself
	srv.SetIDMap(&ninep.IDMap{Host: who.Owner(), Guest: guest.User})
	if b.guestOpens != 0 {
		if err := srv.SetOpenBound(b.guestOpens); err != nil {
			log.Error("world: " + err.Error())
			c.Close()
			return
		}
	}
	srv.ServeConnAs(ctx, c, who)
}

// Close implements ctl.WorldBackend.Close.
func (b *worldBackend) Close() error { return b.w.Close() }
