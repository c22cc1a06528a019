package vmmproc

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/snapshot"
)

// The VMM's root, after Firecracker's jailer (docs/jailer.md: a chroot
// holding only the files Firecracker needs, pivot_root into it, a new
// network namespace, an unprivileged uid). Here the process builds it
// itself, as root in its own mount namespace, right after it has mapped the
// kernel: a small tmpfs on Jail.Root, into which it bind-mounts the few
// host paths it still needs, each at its own host path, so that every
// path in the config means the same inside and outside:
//
//	/                          tmpfs, read-only, nosuid/nodev/noexec, mode 0755
//	<Jail.Work>                the VMM's own directory (rw): disk overlays, maps, snapshots
//	<dir of Vsock.UDS>         root's directory: vsock.sock (bound here as root) and the
//	                           guest→host sockets <uds>_<port> the VMM dials
//	<Disks[i].Path>            each disk image outside Work; read-only when it is an
//	                           overlay's base or a read-only disk
//	<Restore>                  a full snapshot outside Work, read-only (a delta's
//	                           parents, its siblings, must be visible: a chain
//	                           is restored from a store inside Work)
//	/dev/kvm                   until the machine exists; unmounted before the uid drop
//
// Then pivot_root (or, where / is the initramfs, which pivot_root refuses,
// a move of the tmpfs over / and chroot, as switch_root does). From there
// on a path the VMM opens, even as root and through a symlink a compromised
// earlier run planted in Work, resolves inside this tree: it cannot name
// another sandbox's files, the daemon's, the host's, or the FUSE tree.
// The mounts are private to the VMM's namespace: nothing appears on the
// host, where Jail.Root stays an empty directory.

// jailMount is one host path the jail shows, at the same path.
type jailMount struct {
	path string // absolute and clean
	dir  bool
	rw   bool
	dev  bool // a device node: keeps dev; unmounted before the privilege drop
}

// kvmDevice is the KVM device the jail shows until the machine exists.
// A variable only so that TestJailHost's child can show a stand-in on a
// host without one.
var kvmDevice = "/dev/kvm"

// jailMounts lists what the jailed VMM needs, sorted by path; a path
// inside another listed directory is not listed again (it is visible
// through it). Overlays must be in Jail.Work.
func jailMounts(cfg *Config) ([]jailMount, error) {
	j := cfg.Jail
	var ms []jailMount
	in := func(p, dir string) bool { return dir != "" && (p == dir || strings.HasPrefix(p, dir+"/")) }
	check := func(what, p string) error {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("jail: %s %q is not an absolute, clean path", what, p)
		}
		return nil
	}
	add := func(what, p string, m jailMount) error {
		if err := check(what, p); err != nil {
			return err
		}
		m.path = p
		ms = append(ms, m)
		return nil
	}
	if j.Work != "" {
		if err := add("work directory", j.Work, jailMount{dir: true, rw: true}); err != nil {
			return nil, err
		}
	}
	for i, d := range cfg.Disks {
		if d.Overlay != "" && !in(d.Overlay, j.Work) {
			return nil, fmt.Errorf("jail: disk %d: overlay %q is outside the work directory %q", i, d.Overlay, j.Work)
		}
		if !in(d.Path, j.Work) {
			rw := d.Overlay == "" && !d.ReadOnly
			if err := add(fmt.Sprintf("disk %d", i), d.Path, jailMount{rw: rw}); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Vsock != nil {
		if err := check("vsock socket", cfg.Vsock.UDS); err != nil {
			return nil, err
		}
		if d := filepath.Dir(cfg.Vsock.UDS); !in(d, j.Work) {
			ms = append(ms, jailMount{path: d, dir: true, rw: true})
		}
	}
	if cfg.Restore != "" && !in(cfg.Restore, j.Work) {
		if err := add("snapshot", cfg.Restore, jailMount{dir: true}); err != nil {
			return nil, err
		}
	}
	ms = append(ms, jailMount{path: kvmDevice, dev: true, rw: true})

	sort.SliceStable(ms, func(a, b int) bool { return ms[a].path < ms[b].path })
	var out []jailMount
	for _, m := range ms {
		if n := len(out); n > 0 && out[n-1].path == m.path {
			if out[n-1].dir != m.dir {
				return nil, fmt.Errorf("jail: %q is both a file and a directory", m.path)
			}
			out[n-1].rw = out[n-1].rw || m.rw
			continue
		}
		covered := false
		for _, o := range out {
			if o.dir && in(m.path, o.path) {
				covered = true
			}
		}
		if !covered {
			out = append(out, m)
		}
	}
	return out, nil
}

// enterJail builds the root on cfg.Jail.Root and moves the process into
// it (see above). Root in a mount namespace of its own is required.
func enterJail(cfg *Config) error {
	j := cfg.Jail
	if !j.Namespaces {
		return fmt.Errorf("jail: a root needs the VMM's own mount namespace (Namespaces)")
	}
	if !filepath.IsAbs(j.Root) {
		return fmt.Errorf("jail: root %q is not an absolute path", j.Root)
	}
	ms, err := jailMounts(cfg)
	if err != nil {
		return err
	}
	// Nothing done here may reach the host's mount table.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("jail: make mounts private: %w", err)
	}
	const hard = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("sandfs-jail", j.Root, "tmpfs", hard, "mode=0755,size=64k,nr_inodes=256"); err != nil {
		return fmt.Errorf("jail: mount tmpfs on %s: %w", j.Root, err)
	}
	if err := bindMounts(j.Root, ms); err != nil {
		return err
	}
	if err := unix.Mount("", j.Root, "", unix.MS_REMOUNT|unix.MS_RDONLY|hard, ""); err != nil {
		return fmt.Errorf("jail: make the root read-only: %w", err)
	}
	return pivotInto(j.Root)
}

// checkRestoreChain, in the jail, refuses a delta to restore from
// outside Jail.Work with a clear error: the jail shows only the
// snapshot's own directory there, not the parents beside it. Only the
// snapshot's meta is read (bounded, checked: snapshot.Open).
func checkRestoreChain(cfg *Config) error {
	w := cfg.Jail.Work
	if cfg.Restore == "" || (w != "" && strings.HasPrefix(cfg.Restore, w+"/")) {
		return nil
	}
	s, err := snapshot.Open(cfg.Restore)
	if err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if !s.Full() {
		return msg.Errorf(unix.EXDEV, "jail: snapshot %s is a delta outside the work directory %s: restore a chain from a store inside it", msg.Cite(cfg.Restore), msg.Cite(w))
	}
	return nil
}

// bindMounts bind-mounts each of ms at its own path under root, then
// remounts it with its flags.
func bindMounts(root string, ms []jailMount) error {
	for _, m := range ms {
		target := root + m.path
		if err := mountPoint(target, m.dir); err != nil {
			return fmt.Errorf("jail: %w", err)
		}
		// Not MS_REC: mounts below the source (a FUSE tree under the
		// state directory, say) stay out.
		if err := unix.Mount(m.path, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("jail: bind %s: %w", m.path, err)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NOEXEC)
		if !m.dev {
			flags |= unix.MS_NODEV
		}
		if !m.rw {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("jail: remount %s: %w", m.path, err)
		}
	}
	return nil
}

// pivotInto makes root the process's root (see above).
func pivotInto(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	switch err := unix.PivotRoot(".", "."); err {
	case nil:
		// The old root is stacked on "." (pivot_root(2), "pivot_root(".", ".")").
		if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
			return fmt.Errorf("jail: detach the old root: %w", err)
		}
	case unix.EINVAL:
		// / is the initramfs (rootfs), which cannot be pivoted away
		// (the lab runs so): move the jail over it and chroot, as
		// switch_root does. The old root stays underneath, named by no
		// path; without CAP_SYS_CHROOT (gone with the uid drop) and
		// chroot (not in the seccomp allowlist) nothing climbs out.
		if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("jail: move the root over /: %w", err)
		}
		if err := unix.Chroot("."); err != nil {
			return fmt.Errorf("jail: chroot: %w", err)
		}
	default:
		return fmt.Errorf("jail: pivot_root %s: %w", root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	return nil
}

// mountPoint creates the directory or empty file target (and its
// parents) in the jail's tmpfs.
func mountPoint(target string, dir bool) error {
	if dir {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// leaveDevices unmounts the device nodes the jail showed while the
// machine was built (/dev/kvm): the process keeps its open fds, and a
// compromised VMM finds no device to open.
func leaveDevices(cfg *Config) error {
	ms, err := jailMounts(cfg)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.dev {
			if err := unix.Unmount(m.path, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("jail: unmount %s: %w", m.path, err)
			}
		}
	}
	return nil
}
