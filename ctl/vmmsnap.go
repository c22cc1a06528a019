package ctl

// Snapshots of VMMRuntime's machines (Snapshotter, SnapshotRestorer):
// the VMM writes the memory snapshot into its sandbox's own store
// (work/snapshots/, where its chain lives, docs/snapshots.md "Jailed
// VMMs") and a clone of its disk layer (work/snapdisk/); the daemon
// links those files, made root's and read-only, into the Plane's
// snapshot directory. A restore links the chain back into the new
// machine's own store and copies the frozen layer.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/snapshot"
)

var (
	_ Snapshotter      = (*vmmMachine)(nil)
	_ SnapshotRestorer = (*VMMRuntime)(nil)
)

// In a machine's work directory.
const (
	workSnaps = "snapshots" // the VMM's snapshot store: its chain
	workDisks = "snapdisk"  // the disk layers it froze, by snapshot id
)

// Snapshot implements Snapshotter for a paused VMM: memory (a delta over
// parent when parent is the machine's last snapshot), then its disk
// layer, then both imported into dir.
func (m *vmmMachine) Snapshot(ctx context.Context, dir, parent string) (SnapshotStats, error) {
	if m.work == "" || m.host == "" || m.image == "" {
		return SnapshotStats{}, Errorf(syscall.ENOTSUP, "the machine's work directory, boot host name or disk image is unknown")
	}
	id := filepath.Base(dir)
	store := filepath.Join(m.work, workSnaps)
	over, base := "", ""
	// After a resume from disk, a delta over the snapshot the pause
	// image is over, with the image folded in (foldRoot).
	switch root := m.foldRoot(); {
	case parent != "" && parent == root:
		over = filepath.Join(store, parent)
	case m.base != "" && root == filepath.Base(m.base):
		// Its first snapshot since the template restore.
		over, base = filepath.Join(store, root), m.base
	}
	// What an earlier try of this name left (it was never listed: the
	// registry reserved the name) would make the VMM refuse it.
	if err := removeBeneath(m.work, filepath.Join(workSnaps, id)); err != nil {
		return SnapshotStats{}, Errorf(syscall.EIO, "removing what an earlier snapshot %s left: %v", msg.Cite(id), err)
	}
	var tm snapshot.Timing
	t := snapshot.Now()
	if err := m.takeMem(ctx, filepath.Join(store, id), &over, m.p.Snapshot); err != nil {
		return SnapshotStats{}, err
	}
	tm.Mark("vmm-snapshot", &t)
	if over == "" {
		base = ""
	}
	layer := filepath.Join(workDisks, id)
	if err := m.p.CloneDisk(ctx, 0, filepath.Join(m.work, layer)); err != nil {
		return SnapshotStats{}, err
	}
	tm.Mark("clonedisk", &t)
	// The memory stays in the VMM's store too (the chain of its next
	// delta); the layer is moved out.
	for _, f := range []struct {
		src, dst string
		move     bool
	}{
		{filepath.Join(workSnaps, id, snapshot.MetaFile), snapshot.MetaFile, false},
		{filepath.Join(workSnaps, id, snapshot.MemFile), snapshot.MemFile, false},
		{layer, entryLayer, true},
		{layer + ".map", entryLayer + ".map", true},
	} {
		if err := importFile(m.work, f.src, filepath.Join(dir, f.dst), m.uid, f.move); err != nil {
			return SnapshotStats{}, Errorf(syscall.EIO, "import %s: %v", msg.Cite(f.src), err)
		}
	}
	tm.Mark("import", &t)
	s, err := snapshot.Open(dir)
	if err != nil {
		return SnapshotStats{}, err
	}
	tm.Mark("open", &t)
	if s.Parent != "" && s.Parent != filepath.Base(over) {
		return SnapshotStats{}, Errorf(syscall.EIO, "the VMM wrote a delta over %s, not %s", msg.Cite(s.Parent), msg.Cite(filepath.Base(over)))
	}
	if s.Parent == "" {
		base = ""
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, entryLayer), &st); err != nil {
		return SnapshotStats{}, err
	}
	return SnapshotStats{Parent: s.Parent, Base: base, DataBytes: s.Pages() * snapshot.PageSize, DiskBytes: uint64(st.Blocks) * 512,
		Boot: m.host + " image=" + m.image, Took: tm}, nil
}

// takeMem has the VMM write its memory snapshot at dir with take (its
// process's Snapshot, or SaveToDisk for a pause to disk), a delta over
// *over when set. An adopted machine's recorded last snapshot may not be
// the VMM's (lastUnsure), nor, after a resume from disk, the root of its
// pause image (the VMM wrote that image full, compacting): a delta it
// refuses (EINVAL) is taken full, and *over becomes "". On success the
// machine's chain ends at dir.
func (m *vmmMachine) takeMem(ctx context.Context, dir string, over *string, take func(ctx context.Context, dir, parent string) error) error {
	err := take(ctx, dir, *over)
	unsure := m.lastUnsure || strings.HasPrefix(m.last, pauseMark)
	if err != nil && *over != "" && unsure && Errno(err) == syscall.EINVAL {
		*over = ""
		err = take(ctx, dir, "")
	}
	if err != nil {
		return err
	}
	m.last, m.lastUnsure = filepath.Base(dir), false // listed or not
	return nil
}

// importFile links rel, a file the VMM of uid wrote under its work
// directory, to dst, after making it root's and read-only for everyone
// (the VMM can no longer change it). rel is resolved beneath work without
// following any symlink; it must be a regular file with one link, owned
// by uid (0: an unjailed VMM, the daemon's own user; then nothing is
// chowned). With move, rel is then unlinked from its directory.
func importFile(work, rel, dst string, uid int, move bool) error {
	wfd, err := unix.Open(work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(wfd)
	beneath := func(p string, flags uint64) (int, error) {
		return unix.Openat2(wfd, p, &unix.OpenHow{
			Flags:   flags | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	dfd, err := beneath(filepath.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	// O_NONBLOCK: a FIFO in its place must not hang the daemon.
	fd, err := unix.Openat(dfd, filepath.Base(rel), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("not a regular file")
	case st.Nlink != 1:
		return fmt.Errorf("%d links", st.Nlink)
	case uid != 0 && int(st.Uid) != uid:
		return fmt.Errorf("owned by uid %d, not the VMM's %d", st.Uid, uid)
	}
	if uid != 0 {
		if err := unix.Fchown(fd, 0, 0); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, 0o644); err != nil {
		return err
	}
	if err := noWriters(fd); err != nil {
		return err
	}
	err = unix.Linkat(fd, "", unix.AT_FDCWD, dst, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOENT) { // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH
		err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
	}
	if err != nil || !move {
		return err
	}
	// In the VMM's own directory, whatever the name now is.
	return unix.Unlinkat(dfd, filepath.Base(rel), 0)
}

// noWriters fails if anyone has fd's file open for writing (an fd or a
// shared writable mapping the VMM kept from before the fchown and fchmod:
// through it the VMM could change a snapshot after it was checked and
// shared, e.g. what a rollback returns to). Nobody can open it for
// writing afterwards (root's, 0644). A read lease is refused (EAGAIN)
// exactly when the file has a writer; it is released at once.
func noWriters(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return errors.New("open for writing by another process")
		}
		return fmt.Errorf("checking for writers (read lease): %w", err)
	}
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return err
}

// removeBeneath removes rel under work, a directory of files or anything
// that is not a directory, resolved as importFile does (no symlink is
// followed; one at rel is removed itself). Absent is not an error.
func removeBeneath(work, rel string) error {
	wfd, err := unix.Open(work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(wfd)
	dfd, err := unix.Openat2(wfd, filepath.Dir(rel), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	defer unix.Close(dfd)
	name := filepath.Base(rel)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return unix.Unlinkat(dfd, name, 0)
	case err != nil:
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := unix.Unlinkat(fd, n, 0); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// Restore implements SnapshotRestorer: s's run directory gets a fresh
// work directory holding a copy of the snapshot's disk layer and the
// snapshot's chain (hard links: the files are root's and read-only), its
// VMM restores the chain from there, and the guest gets fresh entropy, its
// hostname and the wall clock (refreshGuest) before s is reported running.
func (r *VMMRuntime) Restore(ctx context.Context, s Spec, from SnapshotRef) (Machine, error) {
	// Boot is "<host name> image=<imageID>" (vmmMachine.Snapshot).
	host, image, _ := strings.Cut(from.Boot, " image=")
	if host == "" || image == "" {
		return nil, Errorf(syscall.EINVAL, "snapshot %s has no boot host name or image", msg.Cite(from.ID))
	}
	cfg, err := r.config(s, host)
	if err != nil {
		return nil, err
	}
	// The frozen layer holds only what the guest wrote over the image.
	if now, err := imageID(cfg.Disks[0].Path); err != nil || now != image {
		return nil, Errorf(syscall.ESTALE, "template %s changed since snapshot %s was taken (its disk layer is over the old image)", msg.Cite(s.Template), msg.Cite(from.ID))
	}
	start := time.Now()
	work := WorkDir(s)
	// A rollback: the old machine has ended; nothing of its uid runs
	// while the new work directory is laid out.
	if err := os.RemoveAll(work); err != nil {
		return nil, Errorf(syscall.EIO, "restore: %v", err)
	}
	if err := prepareRunDir(s.Dir, cfg.Jail.UID); err != nil {
		return nil, err
	}
	for _, n := range []string{entryLayer, entryLayer + ".map"} {
		if err := CopyLayerFile(filepath.Join(work, n), filepath.Join(from.Dir, n), cfg.Jail.UID); err != nil {
			return nil, Errorf(syscall.EIO, "restore: disk layer: %v", err)
		}
	}
	if err := linkChain(filepath.Join(work, workSnaps), from.Dir, cfg.Jail.UID); err != nil {
		return nil, Errorf(Errno(err), "restore: %s", errText(err))
	}
	ph := restorePhases{start: start, laid: time.Now()}
	vm, err := r.launch(ctx, s.ID, s.Config, cfg, filepath.Join(work, workSnaps, from.ID))
	if err != nil {
		return nil, err
	}
	ph.launched = time.Now()
	vm.last = from.ID
	if ph.via, err = vm.refresh(ctx, s.ID); err != nil {
		vm.giveUp(r.Log, "restore", s.ID, err)
		return nil, Errorf(Errno(err), "after restore: %s", errText(err))
	}
	r.Log.Info("restored from snapshot: agent serving", append([]any{"id", s.ID, "snapshot", from.ID}, ph.attrs()...)...)
	return vm, nil
}

// linkChain makes store (new) the VMM's snapshot store holding the chain
// that ends at dir: a directory per snapshot, root's, with hard links to
// its files; store itself is uid's, for the snapshots the VMM takes next.
func linkChain(store, dir string, uid int) error {
	chain, err := snapshot.Chain(dir)
	if err != nil {
		return err
	}
	if err := os.Mkdir(store, 0o700); err != nil {
		return err
	}
	for _, c := range chain {
		d := filepath.Join(store, c.ID)
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		for _, f := range []string{snapshot.MetaFile, snapshot.MemFile} {
			if err := os.Link(filepath.Join(c.Dir, f), filepath.Join(d, f)); err != nil {
				return err
			}
		}
	}
	if uid != 0 {
		return os.Lchown(store, uid, uid)
	}
	return nil
}

// cmdlineValue is the value of key=value on a kernel command line, "" if
// absent.
func cmdlineValue(cmdline, key string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
