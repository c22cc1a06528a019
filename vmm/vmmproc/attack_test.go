package vmmproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A compromised VMM, played by this test binary. The attacks run inside a
// confined process (a Launch'ed VMM through afterConfine, or the jail
// child of TestJailHost) and are derived from its config alone, for the
// layout ctl.VMMRuntime gives a sandbox and the tests copy:
//
//	<base>/attacker/            the attacker's run directory (Jail.Work is <run>/work)
//	<base>/victim/              another sandbox's: console, vmm.log, work/rootfs.cow(.map), vsock/vsock.sock
//	<base>/host.sock            a unix socket of the host, outside every jail
//	@<base>/abstract            an abstract unix socket in the host's network namespace
//
// Each attack prints one line, "attack <name>: refused: <error>" or
// "attack <name>: ALLOWED", then "attack done"; the test reads them back
// (parseAttacks) from the VMM's stderr.

// attackID is the sandbox id that makes a VMM test binary attack.
const attackID = "attacker"

// attackPlan is what the attacker goes after.
type attackPlan struct {
	Run, Other, HostSocket, Abstract string
}

func planFor(cfg *Config) attackPlan {
	run := filepath.Dir(cfg.Jail.Work)
	base := filepath.Dir(run)
	return attackPlan{Run: run, Other: filepath.Join(base, "victim"),
		HostSocket: filepath.Join(base, "host.sock"), Abstract: "@" + base + "/abstract"}
}

// hostFiles are files every uid may read on a host (and in the lab):
// outside the jail they must not exist.
var hostFiles = []string{"/etc/passwd", "/proc/version", "/proc/self/mountinfo", "/sys/kernel/uevent_seqnum"}

// attackTmp is the name the attacker tries to create in the host's
// world-writable directories.
func attackTmp(p attackPlan) string {
	return "sandfs-attack" + strings.ReplaceAll(filepath.Dir(p.Run), "/", "_")
}

// attack runs every attack and writes the result lines to w.
func attack(cfg *Config, w io.Writer) {
	p := planFor(cfg)
	try := func(name string, err error) {
		if err != nil {
			fmt.Fprintf(w, "attack %s: refused: %v\n", name, err)
		} else {
			fmt.Fprintf(w, "attack %s: ALLOWED\n", name)
		}
	}
	// Host files and directories.
	for _, f := range hostFiles {
		_, err := os.ReadFile(f)
		try("read host file "+f, err)
	}
	for _, d := range []string{"/tmp", "/dev/shm", "/var/tmp"} {
		try("create a file in host "+d, os.WriteFile(filepath.Join(d, attackTmp(p)), []byte("x"), 0o644))
	}
	ents, _ := os.ReadDir("/")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	fmt.Fprintf(w, "attack root: %s\n", strings.Join(names, " "))
	fmt.Fprintf(w, "attack env: %d\n", len(os.Environ()))
	// Descriptors without end (each costs the host's kernel memory):
	// how many it could open is checked against the VMM's bound.
	var fds []int
	for len(fds) < 1<<20 {
		fd, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			break
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	fmt.Fprintf(w, "attack files: %d\n", len(fds))

	// Another sandbox's files: its disk, its logs, its agent's socket.
	o := p.Other
	_, err := os.OpenFile(filepath.Join(o, "work", "rootfs.cow"), os.O_RDWR, 0)
	try("open other sandbox's disk", err)
	_, err = os.ReadFile(filepath.Join(o, "console"))
	try("read other sandbox's console", err)
	try("rename other sandbox's disk", os.Rename(filepath.Join(o, "work", "rootfs.cow"), filepath.Join(o, "work", "stolen")))
	try("rename other sandbox's disk map", os.Rename(filepath.Join(o, "work", "rootfs.cow.map"), filepath.Join(o, "work", "stolen.map")))
	try("rename other sandbox's console", os.Rename(filepath.Join(o, "console"), filepath.Join(o, "console.old")))
	try("rename other sandbox's vmm.log", os.Rename(filepath.Join(o, "vmm.log"), filepath.Join(o, "vmm.log.old")))
	try("rename other sandbox's vsock socket", os.Rename(filepath.Join(o, "vsock", "vsock.sock"), filepath.Join(o, "vsock", "old.sock")))
	c, err := net.Dial("unix", filepath.Join(o, "vsock", "vsock.sock"))
	if err == nil {
		c.Close()
	}
	try("connect to other sandbox's agent socket", err)
	ln, err := net.Listen("unix", filepath.Join(o, "vsock", "vsock.sock_1024"))
	if err == nil {
		ln.Close()
	}
	try("listen beside other sandbox's agent socket", err)

	// Its own run directory, which root reads and writes: replacing a
	// file there (with a symlink to a host file, say) would make root
	// write guest text or read through it.
	for _, f := range []string{"console", "vmm.log", "vmm.sock", "vmm.sock.json"} {
		try("replace own "+f, os.Rename(filepath.Join(p.Run, f), filepath.Join(p.Run, f+".old")))
	}
	if cfg.Vsock != nil {
		try("replace own vsock socket", os.Rename(cfg.Vsock.UDS, cfg.Vsock.UDS+".old"))
	}

	// The network: any family but unix, the host's sockets.
	for _, f := range []struct {
		name   string
		family int
	}{{"AF_INET", unix.AF_INET}, {"AF_INET6", unix.AF_INET6}, {"AF_NETLINK", unix.AF_NETLINK}, {"AF_PACKET", unix.AF_PACKET}, {"AF_VSOCK", unix.AF_VSOCK}} {
		fd, err := unix.Socket(f.family, unix.SOCK_DGRAM, 0)
		if err == nil {
			unix.Close(fd)
		}
		try("socket "+f.name, err)
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	for _, a := range []string{"169.254.169.254:80", "127.0.0.1:22", "10.0.2.2:80"} {
		c, err := d.Dial("tcp", a)
		if err == nil {
			c.Close()
		}
		try("dial tcp "+a, err)
	}
	for _, a := range []string{p.HostSocket, p.Abstract} {
		c, err := d.Dial("unix", a)
		if err == nil {
			c.Close()
		}
		try("dial unix "+a, err)
	}

	// New processes and namespaces; ioctls beyond KVM's.
	for _, f := range []struct {
		name  string
		flags uintptr
	}{{"fork", uintptr(unix.SIGCHLD)}, {"new user namespace", unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)}} {
		r, _, e := unix.RawSyscall6(unix.SYS_CLONE, f.flags, 0, 0, 0, 0, 0)
		if e == 0 && r == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the child, had there been one
		}
		if e == 0 {
			try("clone "+f.name, nil)
		} else {
			try("clone "+f.name, e)
		}
	}
	var pfd [2]int
	if err := unix.Pipe2(pfd[:], unix.O_CLOEXEC); err == nil {
		_, err := unix.IoctlGetInt(pfd[0], unix.TIOCINQ) // FIONREAD
		try("ioctl FIONREAD", err)
		unix.Close(pfd[0])
		unix.Close(pfd[1])
	}
	fmt.Fprintln(w, "attack done")
}

// attackResult is what one attack line says.
type attackResult struct {
	refused bool
	text    string // the error, or what root and env showed
}

// parseAttacks reads attack lines from a VMM's stderr; done says whether
// the last ("attack done") was there.
func parseAttacks(log string) (res map[string]attackResult, done bool) {
	res = map[string]attackResult{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "attack ")
		if !ok {
			continue
		}
		if line == "done" {
			done = true
			continue
		}
		name, rest, _ := strings.Cut(line, ": ")
		r := attackResult{text: rest}
		if t, ok := strings.CutPrefix(rest, "refused: "); ok {
			r = attackResult{refused: true, text: t}
		}
		res[name] = r
	}
	return res, done
}

// jailChild runs in a re-executed test binary started by TestJailHost in
// new namespaces: it takes the config from $SANDFS_TEST_JAIL, enters the
// jail, confines itself as a VMM does (without a machine) and attacks.
func jailChild(cfgJSON string) {
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Println("jail child: bad config:", err)
		os.Exit(3)
	}
	if dev := os.Getenv("SANDFS_TEST_KVM"); dev != "" {
		kvmDevice = dev
	}
	if err := enterJail(&cfg); err != nil {
		fmt.Println("jail child:", err)
		os.Exit(3)
	}
	if err := confineSelf(&cfg); err != nil {
		fmt.Println("jail child:", err)
		os.Exit(3)
	}
	attack(&cfg, os.Stdout)
	os.Exit(0)
}

// sortedKeys is for messages.
func sortedKeys(m map[string]attackResult) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}
