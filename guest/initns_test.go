package guest

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
)

// TestInitDuties runs the init duties for real, as PID 1 of fresh mount,
// UTS, network, IPC and PID namespaces (the test binary re-executed
// through the reaper), so the host is not touched: Mounts, SetHostname,
// Network on a dummy eth0, and reaping an orphan. The clock is not
// namespaced, so SetClock is left to the lab.
func TestInitDuties(t *testing.T) {
	if os.Getenv("GUEST_INIT_HELPER") == "1" {
		os.Exit(initHelper())
	}
	needRoot(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	exited := make(chan unix.WaitStatus, 1)
	attr := &syscall.ProcAttr{
		Env:   append(os.Environ(), "GUEST_INIT_HELPER=1"),
		Files: []uintptr{null.Fd(), w.Fd(), w.Fd()},
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC},
	}
	_, err = getReaper().start(os.Args[0], []string{os.Args[0], "-test.run=^TestInitDuties$"}, attr, func(ws unix.WaitStatus) { exited <- ws })
	w.Close()
	if err != nil {
		testenv.Need(t, false, fmt.Sprintf("cannot create namespaces: %v", err))
	}
	out, _ := io.ReadAll(r)
	ws := <-exited
	t.Logf("helper output:\n%s", out)
	if ws.ExitStatus() != 0 || !strings.Contains(string(out), "ALL OK") {
		t.Errorf("init duties failed (status %v)", ws)
	}
}

func initHelper() int {
	fail := 0
	check := func(what string, err error) {
		if err != nil {
			fmt.Printf("FAIL %s: %v\n", what, err)
			fail++
		} else {
			fmt.Printf("ok   %s\n", what)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Println("FAIL make / private:", err)
		return 1
	}
	etc, err := os.MkdirTemp("/var/tmp", "sandfs-init-test")
	if err != nil {
		fmt.Println("FAIL", err)
		return 1
	}
	defer os.RemoveAll(etc)

	check("pid 1", func() error {
		if os.Getpid() != 1 {
			return fmt.Errorf("pid %d", os.Getpid())
		}
		return nil
	}())
	// Start as a fresh guest would: nothing of the host's mounted there
	// (the kernel's own devtmpfs on /dev is left, as CONFIG_DEVTMPFS_MOUNT
	// does in the guest).
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].target != "/dev" {
			unix.Unmount(mounts[i].target, unix.MNT_DETACH)
		}
	}
	check("Mounts", Mounts())
	check("Mounts again (idempotent)", Mounts())
	check("no stacked mounts", func() error {
		b, err := os.ReadFile("/proc/self/mounts")
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 2 {
				seen[f[1]]++
			}
		}
		for _, m := range mounts {
			if seen[m.target] != 1 {
				return fmt.Errorf("%s mounted %d times", m.target, seen[m.target])
			}
		}
		return nil
	}())
	for _, m := range []struct {
		path  string
		magic int64
	}{
		{"/proc", unix.PROC_SUPER_MAGIC}, {"/sys", unix.SYSFS_MAGIC}, {"/dev", unix.TMPFS_MAGIC},
		{"/dev/pts", unix.DEVPTS_SUPER_MAGIC}, {"/dev/shm", unix.TMPFS_MAGIC}, {"/tmp", unix.TMPFS_MAGIC},
		{"/run", unix.TMPFS_MAGIC}, {"/sys/fs/cgroup", unix.CGROUP2_SUPER_MAGIC},
	} {
		var st unix.Statfs_t
		err := unix.Statfs(m.path, &st)
		if err == nil && st.Type != m.magic {
			err = fmt.Errorf("fs type %#x, want %#x", st.Type, m.magic)
		}
		check("mounted "+m.path, err)
	}
	check("/proc is this pid namespace's", func() error {
		s, err := os.Readlink("/proc/self")
		if err != nil || s != "1" {
			return fmt.Errorf("/proc/self -> %q, %v", s, err)
		}
		return nil
	}())
	check("/dev/fd link", func() error { _, err := os.Stat("/dev/fd/0"); return err }())
	check("pty works", func() error {
		m, s, err := openPTY(24, 80)
		if err == nil {
			m.Close()
			s.Close()
		}
		return err
	}())

	check("SetHostname", SetHostname(Config{Hostname: "sandfs-test"}, etc))
	check("hostname set", func() error {
		var u unix.Utsname
		unix.Uname(&u)
		if h := unix.ByteSliceToString(u.Nodename[:]); h != "sandfs-test" {
			return fmt.Errorf("nodename %q", h)
		}
		b, _ := os.ReadFile(filepath.Join(etc, "etc/hosts"))
		if !strings.Contains(string(b), "127.0.1.1\tsandfs-test") {
			return fmt.Errorf("hosts %q", b)
		}
		return nil
	}())

	func() {
		// An eth0 to configure: dummy, else one end of a veth pair.
		if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}}); err != nil {
			err = netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"})
			if err != nil {
				fmt.Printf("SKIP network: kernel has neither dummy nor veth links: %v\n", err)
				return
			}
			if p, err := netlink.LinkByName("peer0"); err == nil {
				netlink.LinkSetUp(p)
			}
		}
		cfg, errs := ParseCmdline("sandfs.ip=10.9.0.2/24 sandfs.gw=10.9.0.1 sandfs.dns=10.9.0.53,1.1.1.1 sandfs.mtu=1400")
		check("cmdline", func() error {
			if len(errs) > 0 {
				return errs[0]
			}
			return nil
		}())
		check("Network", Network(cfg, etc))
		check("Network again (idempotent)", Network(cfg, etc))
		check("network configured", func() error {
			lo, _ := netlink.LinkByName("lo")
			if lo == nil || lo.Attrs().Flags&net.FlagUp == 0 {
				return fmt.Errorf("lo not up")
			}
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			if l.Attrs().Flags&net.FlagUp == 0 || l.Attrs().MTU != 1400 {
				return fmt.Errorf("eth0 flags %v mtu %d", l.Attrs().Flags, l.Attrs().MTU)
			}
			addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
			if len(addrs) != 1 || addrs[0].IPNet.String() != "10.9.0.2/24" {
				return fmt.Errorf("addrs %v", addrs)
			}
			routes, _ := netlink.RouteList(l, netlink.FAMILY_V4)
			def := false
			for _, r := range routes {
				if (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.Equal(net.ParseIP("10.9.0.1")) {
					def = true
				}
			}
			if !def {
				return fmt.Errorf("no default route via 10.9.0.1 in %v", routes)
			}
			b, _ := os.ReadFile(filepath.Join(etc, "etc/resolv.conf"))
			if string(b) != "nameserver 10.9.0.53\nnameserver 1.1.1.1\n" {
				return fmt.Errorf("resolv.conf %q", b)
			}
			return nil
		}())
		check("readdress (a restored clone)", func() error {
			c2, _ := ParseCmdline("sandfs.ip=10.9.1.7/24 sandfs.gw=10.9.1.1")
			if err := Network(c2, etc); err != nil {
				return err
			}
			l, _ := netlink.LinkByName("eth0")
			addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
			if len(addrs) != 1 || addrs[0].IPNet.String() != "10.9.1.7/24" {
				return fmt.Errorf("addrs %v", addrs)
			}
			return nil
		}())
	}()

	check("orphans reaped", func() error {
		done := make(chan unix.WaitStatus, 1)
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		_, err := getReaper().start("/bin/sh", []string{"sh", "-c", "sleep 0.2 & sleep 0.2 & exit 5"},
			&syscall.ProcAttr{Files: []uintptr{null.Fd(), null.Fd(), null.Fd()}}, func(ws unix.WaitStatus) { done <- ws })
		if err != nil {
			return err
		}
		if ws := <-done; ws.ExitStatus() != 5 {
			return fmt.Errorf("sh status %v, want exit 5 delivered to its record", ws)
		}
		time.Sleep(600 * time.Millisecond)
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
				return fmt.Errorf("zombie: %s", b)
			}
		}
		return nil
	}())
	if fail == 0 {
		fmt.Println("ALL OK")
		return 0
	}
	return 1
}
