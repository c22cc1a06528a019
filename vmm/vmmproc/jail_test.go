package vmmproc

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
)

// Test uids for an attacking and a victim sandbox (in ctl's default range).
const (
	testAttackerUID = 1879048192 + 4242
	testVictimUID   = 1879048192 + 4243
)

// TestJailMounts: what a jailed VMM sees, for the layout ctl gives a
// sandbox and for the cases it refuses.
func TestJailMounts(t *testing.T) {
	run := "/var/lib/sandfs/run/t1"
	cfg := Config{
		Disks:   []DiskConfig{{Path: "/opt/t/base.ext4", Overlay: run + "/work/rootfs.cow"}, {Path: "/srv/data.img", ReadOnly: true}, {Path: "/srv/rw.img"}},
		Vsock:   &VsockConfig{UDS: run + "/vsock/vsock.sock"},
		Restore: "/var/lib/sandfs/snap/s1",
		Jail:    JailConfig{Namespaces: true, Root: run + "/root", Work: run + "/work"},
	}
	got, err := jailMounts(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []jailMount{
		{path: "/dev/kvm", dev: true, rw: true},
		{path: "/opt/t/base.ext4"},
		{path: "/srv/data.img"},
		{path: "/srv/rw.img", rw: true},
		{path: run + "/vsock", dir: true, rw: true},
		{path: run + "/work", dir: true, rw: true},
		{path: "/var/lib/sandfs/snap/s1", dir: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("jailMounts =\n%+v\nwant\n%+v", got, want)
	}

	// A snapshot inside Work is not mounted again; a second disk on
	// the same base is one mount.
	cfg.Restore = run + "/work/snap"
	cfg.Disks = append(cfg.Disks[:1], DiskConfig{Path: "/opt/t/base.ext4", Overlay: run + "/work/b.cow"})
	got, _ = jailMounts(&cfg)
	if n := len(got); n != 4 {
		t.Errorf("jailMounts with the snapshot in Work = %+v; want kvm, base, vsock, work", got)
	}

	for name, bad := range map[string]func(c *Config){
		"overlay outside work": func(c *Config) { c.Disks = []DiskConfig{{Path: "/b", Overlay: "/tmp/x.cow"}} },
		"relative disk":        func(c *Config) { c.Disks = []DiskConfig{{Path: "b.img", ReadOnly: true}} },
		"unclean vsock":        func(c *Config) { c.Vsock = &VsockConfig{UDS: run + "/vsock/../x.sock"} },
		"relative snapshot":    func(c *Config) { c.Restore = "snap" },
	} {
		c := cfg
		c.Restore = ""
		bad(&c)
		if _, err := jailMounts(&c); err == nil {
			t.Errorf("%s: jailMounts accepted %+v", name, c)
		}
	}
}

// jailLayout makes, under base, the run directories of an attacking and
// a victim sandbox as ctl.VMMRuntime makes them (run dir root's, 0700;
// root/ empty; vsock/ root's, 0711, with a listening vsock.sock; work/ the
// sandbox's uid's, 0700, with a disk and its map; console, vmm.log,
// vmm.sock, vmm.sock.json root's), a base image, and the host's unix
// sockets (base/host.sock and the abstract @base/abstract). It returns
// the attacker's config and the listeners (closed at cleanup).
func jailLayout(t *testing.T, base string) (Config, []net.Listener) {
	t.Helper()
	var lns []net.Listener
	listen := func(addr string) {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns = append(lns, ln)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, uid := range map[string]int{"attacker": testAttackerUID, "victim": testVictimUID} {
		run := filepath.Join(base, name)
		must(os.MkdirAll(filepath.Join(run, "root"), 0o700))
		must(os.Mkdir(filepath.Join(run, "vsock"), 0o711))
		must(os.Mkdir(filepath.Join(run, "work"), 0o700))
		for _, f := range []string{"console", "vmm.log", "vmm.sock", "vmm.sock.json"} {
			must(os.WriteFile(filepath.Join(run, f), []byte(name+" "+f+"\n"), 0o640))
		}
		for _, f := range []string{"rootfs.cow", "rootfs.cow.map"} {
			p := filepath.Join(run, "work", f)
			must(os.WriteFile(p, []byte(name+" "+f+"\n"), 0o600))
			must(os.Chown(p, uid, uid))
		}
		must(os.Chown(filepath.Join(run, "work"), uid, uid))
		listen(filepath.Join(run, "vsock", "vsock.sock"))
	}
	listen(filepath.Join(base, "host.sock"))
	listen("@" + base + "/abstract")
	img := filepath.Join(base, "base.img")
	must(os.WriteFile(img, make([]byte, 1<<20), 0o644))
	run := filepath.Join(base, "attacker")
	return Config{
		ID: attackID, Kernel: "unused", MemBytes: 2 << 20, CPUs: 1,
		Disks: []DiskConfig{{Path: img, Overlay: filepath.Join(run, "work", "rootfs.cow")}},
		Vsock: &VsockConfig{CID: 3, UDS: filepath.Join(run, "vsock", "vsock.sock")},
		Jail: JailConfig{Namespaces: true, Seccomp: true, Root: filepath.Join(run, "root"),
			Work: filepath.Join(run, "work"), UID: testAttackerUID, GID: testAttackerUID},
	}, lns
}

// snapshotTree records path → mode, size and hash of the content, owner
// and inode of everything under dir, to show that nothing changed.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %d bytes sha256 %x", len(b), sha256.Sum256(b))
		}
		m[p] = fmt.Sprintf("%s uid=%d ino=%d", v, st.Uid, st.Ino)
		return nil
	})
	return m
}

// checkAttacks asserts that every attack was refused, that the jail's
// root shows only the first components of its mounts, and (env) that
// the environment was empty; then that the host side is untouched:
// nothing created in its world-writable directories, no connection on its
// sockets, the victim's and attacker's run directories as they were.
func checkAttacks(t *testing.T, out string, cfg *Config, lns []net.Listener, before map[string]string, base string, env bool) {
	t.Helper()
	res, done := parseAttacks(out)
	if !done {
		t.Fatalf("the attacker did not finish:\n%s", out)
	}
	for _, name := range sortedKeys(res) {
		r := res[name]
		switch name {
		case "root":
			ms, _ := jailMounts(cfg)
			want := map[string]bool{}
			for _, m := range ms {
				want[strings.Split(m.path, "/")[1]] = true
			}
			for _, e := range strings.Fields(r.text) {
				if !want[e] {
					t.Errorf("the jail's / shows %q (all: %q); want only %v", e, r.text, want)
				}
			}
		case "env":
			if env && r.text != "0" {
				t.Errorf("the VMM's environment has %s variables; want none", r.text)
			}
		case "files":
			if n, err := strconv.Atoi(r.text); err != nil || n >= maxFiles {
				t.Errorf("the VMM opened %s more files; want fewer than its bound, %d", r.text, maxFiles)
			}
		default:
			if !r.refused {
				t.Errorf("attack %q succeeded", name)
			} else {
				t.Logf("attack %s: refused: %s", name, r.text)
			}
		}
	}
	p := planFor(cfg)
	for _, d := range []string{"/tmp", "/dev/shm", "/var/tmp"} {
		if _, err := os.Lstat(filepath.Join(d, attackTmp(p))); err == nil {
			os.Remove(filepath.Join(d, attackTmp(p)))
			t.Errorf("the attacker created %s in %s", attackTmp(p), d)
		}
	}
	for _, ln := range lns {
		ln.(*net.UnixListener).SetDeadline(time.Now().Add(10 * time.Millisecond))
		if c, err := ln.Accept(); err == nil {
			c.Close()
			t.Errorf("the attacker connected to %s", ln.Addr())
		}
	}
	after := snapshotTree(t, base)
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed: %q, now %q", p, v, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

// TestJailHost runs the jail on this host, without KVM: a re-executed
// test binary in the VMM's namespaces enters the jail a VMM config asks
// for (pivot_root on an ordinary root, the lab's is the initramfs), drops
// to its uid with the VMM's seccomp filter, and attacks (attack_test.go):
// host files, another sandbox's files and sockets, its own run directory,
// other socket families, the host's unix sockets, new processes, ioctls.
// Every attack is refused and nothing outside changed. The jail shows a
// stand-in for /dev/kvm (a node with /dev/null's numbers, made in the
// test's directory), so the test is the same on hosts with and without
// KVM; the lab's jailed VMMs show the real one.
func TestJailHost(t *testing.T) {
	testenv.NeedRoot(t)
	base := t.TempDir()
	cfg, lns := jailLayout(t, base)
	kvm := filepath.Join(base, "kvm")
	if err := syscall.Mknod(kvm, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cfg)
	before := snapshotTree(t, base)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDFS_TEST_JAIL="+string(b), "SANDFS_TEST_KVM="+kvm)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("jail child: %v\n%s", err, out)
	}
	checkAttacks(t, string(out), &cfg, lns, before, base, false)
	if ents, _ := os.ReadDir(cfg.Jail.Root); len(ents) != 0 {
		t.Errorf("the jail root %s is not empty on the host: %v", cfg.Jail.Root, ents)
	}
	if top := strings.Split(kvm, "/")[1]; !slices.Contains(strings.Fields(parseRoot(string(out))), top) {
		t.Errorf("the jail's / lacks %s (the kvm device's mount point): %q", top, parseRoot(string(out)))
	}
}

func parseRoot(out string) string {
	res, _ := parseAttacks(out)
	return res["root"].text
}

// TestLaunchNoFollow: Launch (root, in the daemon) never writes through a
// symlink where its console, its log or its config should be, as one left
// in a run directory by anyone but root would be: it fails with ELOOP and
// the link's target is untouched. (Before, it appended the VMM's output
// to the target or overwrote it with the config.)
func TestLaunchNoFollow(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, which := range []string{"console", "vmm.log", "vmm.sock.json"} {
		t.Run(which, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "precious")
			if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, which)); err != nil {
				t.Fatal(err)
			}
			// The VMM is logFloodVMM: it writes to its stderr and
			// answers status, so nothing but the link stops Launch.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := Launch(ctx, Config{Kernel: "unused", MemBytes: 2 << 20, CPUs: 1, Binary: bin,
				Socket: filepath.Join(dir, "vmm.sock"), Console: filepath.Join(dir, "console"),
				LogFile: filepath.Join(dir, "vmm.log"), Env: []string{logFloodEnv + "=1"}})
			if err == nil {
				p.Stop(ctx)
			}
			if !errors.Is(err, syscall.ELOOP) {
				t.Errorf("Launch with %s a symlink = %v; want ELOOP", which, err)
			}
			if b, _ := os.ReadFile(target); string(b) != "precious\n" {
				t.Errorf("the symlink's target now holds %d bytes: %.60q", len(b), b)
			}
		})
	}
}
