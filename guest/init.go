package guest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// mount is one entry of the guest's mount table, set up by Mounts in order.
type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	mode                   os.FileMode // of the mount point, if created
	magic                  int64       // statfs f_type of fstype
}

// mounts is the guest's file system table. /dev/pts uses ptmxmode=0666 so
// that /dev/ptmx (a devtmpfs node) and /dev/pts/ptmx both work; gid=5 is
// the conventional tty group.
var mounts = []mount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555, unix.PROC_SUPER_MAGIC},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555, unix.SYSFS_MAGIC},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755", 0o755, unix.TMPFS_MAGIC},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666,gid=5", 0o755, unix.DEVPTS_SUPER_MAGIC},
	{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777, unix.TMPFS_MAGIC},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777, unix.TMPFS_MAGIC},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755", 0o755, unix.TMPFS_MAGIC},
	{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555, unix.CGROUP2_SUPER_MAGIC},
}

// devLinks are the conventional /dev symlinks devtmpfs does not make.
var devLinks = [][2]string{
	{"/proc/self/fd", "/dev/fd"},
	{"/proc/self/fd/0", "/dev/stdin"},
	{"/proc/self/fd/1", "/dev/stdout"},
	{"/proc/self/fd/2", "/dev/stderr"},
	{"/proc/kcore", "/dev/core"},
}

// Mounts mounts the guest's pseudo file systems (the mounts table). A
// target that already is a mount point of that type (the kernel mounts
// devtmpfs itself with CONFIG_DEVTMPFS_MOUNT) is left alone, so Mounts
// can run twice without stacking mounts.
// It returns every failure joined; init logs them and goes on.
func Mounts() error {
	var errs []error
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, m.mode); err != nil {
			errs = append(errs, fmt.Errorf("mount: mkdir %q: %w", m.target, err))
			continue
		}
		if isMountOf(m.target, m.magic) {
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mount: %s on %q: %w", m.fstype, m.target, err))
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l[0], l[1]); err != nil && !errors.Is(err, os.ErrExist) {
			errs = append(errs, fmt.Errorf("mount: symlink %q: %w", l[1], err))
		}
	}
	return errors.Join(errs...)
}

// isMountOf reports whether dir is a mount point (its device differs
// from its parent's) of a file system with statfs type magic.
func isMountOf(dir string, magic int64) bool {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil || fs.Type != magic {
		return false
	}
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// SetClock sets the system clock (settimeofday(2)); a zero time is a no-op.
func SetClock(c Config) error {
	if c.Time.IsZero() {
		return nil
	}
	tv := unix.NsecToTimeval(c.Time.UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		return fmt.Errorf("clock: settimeofday: %w", err)
	}
	return nil
}

// SetHostname sets the host name and writes /etc/hostname and a localhost
// block in /etc/hosts under root ("/" in the guest). An empty name is a
// no-op.
func SetHostname(c Config, root string) error {
	if c.Hostname == "" {
		return nil
	}
	var errs []error
	if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
		errs = append(errs, fmt.Errorf("hostname: sethostname %q: %w", c.Hostname, err))
	}
	// Not synced: a restore or clone rewrites both (replaceFile). Two
	// fsyncs of the guest's disk: the hostname verb took 16-204 ms
	// (median 88) in a lab run with them, 16-88 (median 64) without.
	if err := replaceFile(filepath.Join(root, "etc/hostname"), []byte(c.Hostname+"\n"), 0o644, false); err != nil {
		errs = append(errs, fmt.Errorf("hostname: %w", err))
	}
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", c.Hostname)
	if err := replaceFile(filepath.Join(root, "etc/hosts"), []byte(hosts), 0o644, false); err != nil {
		errs = append(errs, fmt.Errorf("hostname: %w", err))
	}
	return errors.Join(errs...)
}

// Network brings lo up and, if c.IP is set, gives c.Iface its address,
// brings it up, adds the default route via c.GW and writes
// /etc/resolv.conf under root from c.DNS. It uses rtnetlink (no ip(8)).
func Network(c Config, root string) error {
	var errs []error
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("network: lo up: %w", err))
	}
	if c.IP != nil {
		if err := configureIface(c); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.DNS) > 0 {
		var b strings.Builder
		for _, ip := range c.DNS {
			fmt.Fprintf(&b, "nameserver %s\n", ip)
		}
		if err := writeFileAtomic(filepath.Join(root, "etc/resolv.conf"), []byte(b.String()), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("network: %w", err))
		}
	}
	return errors.Join(errs...)
}

func configureIface(c Config) error {
	l, err := netlink.LinkByName(c.Iface)
	if err != nil {
		return fmt.Errorf("network: no interface %q: %w", c.Iface, err)
	}
	if c.MTU > 0 {
		if err := netlink.LinkSetMTU(l, c.MTU); err != nil {
			return fmt.Errorf("network: mtu %d on %q: %w", c.MTU, c.Iface, err)
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: c.IP.IP, Mask: c.IP.Mask}}
	if err := netlink.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("network: address %s on %q: %w", c.IP, c.Iface, err)
	}
	// The interface has this one address of its family: a restored
	// clone that gets a new address must not keep its parent's.
	family := netlink.FAMILY_V4
	if c.IP.IP.To4() == nil {
		family = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(l, family)
	if err != nil {
		return fmt.Errorf("network: addresses of %q: %w", c.Iface, err)
	}
	for _, a := range addrs {
		if a.IPNet.String() == addr.IPNet.String() || family == netlink.FAMILY_V6 && a.IP.IsLinkLocalUnicast() {
			continue
		}
		if err := netlink.AddrDel(l, &a); err != nil {
			return fmt.Errorf("network: remove old address %s from %q: %w", a.IPNet, c.Iface, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("network: %q up: %w", c.Iface, err)
	}
	if c.GW != nil {
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: c.GW}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("network: default route via %s: %w", c.GW, err)
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside name, syncs it
// and renames it over name, so a crash leaves the old or the new file,
// never half. The new file keeps the old one's owner and mode if it
// existed. A file that already holds data is left alone (no write, no
// fsync at boot).
func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	return replaceFile(name, data, mode, true)
}

// replaceFile is writeFileAtomic, with the fsync before the rename only
// if sync. Without it a crash of the guest may leave the old file or
// the new one (ext4 writes a file renamed over another before the
// rename's commit: auto_da_alloc) and, on other file systems, an empty
// one: for files a restore rewrites each time, whose guest ends with its
// machine and whose snapshots hold the guest's page cache with its disk.
func replaceFile(name string, data []byte, mode os.FileMode, sync bool) error {
	if old, err := os.ReadFile(name); err == nil && bytes.Equal(old, data) {
		return nil
	}
	uid, gid := -1, -1
	if fi, err := os.Stat(name); err == nil {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".new*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", name, err)
	}
	return nil
}
