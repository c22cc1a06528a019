// Package lab runs the development VM ("the lab"): QEMU with the sandfs
// kernel, a busybox initramfs, the repo checkout shared read-only over
// virtio-9p at /opt/sandfs, and one command whose stdout, stderr and exit
// status come back to the host. On hosts without usable hardware
// virtualization QEMU uses TCG with -cpu max, which exposes AMD SVM, so
// /dev/kvm works inside and the real VMM runs unchanged, only slower.
// See docs/lab.md.
package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sandfs/vmm/probe"
	"sandfs/vmm/tailbuf"
)

// GuestRepo is where the repo checkout appears inside the lab.
const GuestRepo = "/opt/sandfs"

// Forward is one QEMU user-networking port forward, host 127.0.0.1:Host
// to guest port Guest.
type Forward struct{ Host, Guest int }

// Options describe one lab run.
type Options struct {
	Repo    string   // host repo checkout (shared read-only at /opt/sandfs); default FindRepo()
	Kernel  string   // default <Repo>/build/vmlinuz
	Args    []string // command and arguments, run as root with /bin/sh semantics of exec
	Env     []string // extra KEY=VALUE for the command
	Dir     string   // guest working directory; default /opt/sandfs
	MemMiB  int      // default 6144 (SANDFS_LAB_MEM)
	CPUs    int      // default 2 (SANDFS_LAB_CPUS)
	Forward []Forward
	Timeout time.Duration // 0: none

	Stdout, Stderr io.Writer // default os.Stdout, os.Stderr
	Stdin          io.Reader // nil: /dev/null; else copied to the command (a pipe, not a terminal)
	Console        io.Writer // kernel console; nil: a log file under the cache dir
	Log            io.Writer // progress lines ("lab: ..."); nil: silent
}

// Result is what a run produced besides the command's output.
type Result struct {
	Status     int           // the command's exit status
	Boot       time.Duration // QEMU start to status report
	ConsoleLog string        // path of the kernel console log, if kept
	Accel      string
}

// ErrNoStatus means the guest stopped without reporting the command's status
// (kernel panic, missing init, QEMU failure).
var ErrNoStatus = errors.New("lab: guest exited without reporting a status")

// Run boots the lab, runs o.Args inside and returns its exit status.
//
// QEMU 7.2's TCG very rarely segfaults during boot (seen about once in 50
// boots on a loaded host). If QEMU dies from a signal we did not send before
// the command wrote any output or status, the boot is retried once.
func Run(ctx context.Context, o Options) (Result, error) {
	res, err, retry := runOnce(ctx, o)
	if retry && ctx.Err() == nil {
		if o.Log != nil || o.Stderr != nil {
			w := o.Stderr
			if w == nil {
				w = os.Stderr
			}
			fmt.Fprintf(w, "lab: %v; booting the lab again\n", firstLine(err))
		}
		res, err, _ = runOnce(ctx, o)
	}
	return res, err
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// countingWriter counts bytes passed through to w.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.w.Write(p)
}

func runOnce(ctx context.Context, o Options) (res Result, err error, retry bool) {
	if len(o.Args) == 0 {
		return res, errors.New("lab: no command"), false
	}
	if o.Repo == "" {
		r, err := FindRepo()
		if err != nil {
			return res, err, false
		}
		o.Repo = r
	}
	if o.Kernel == "" {
		o.Kernel = filepath.Join(o.Repo, "build", "vmlinuz")
	}
	if _, err := os.Stat(o.Kernel); err != nil {
		return res, fmt.Errorf("lab: kernel missing %q (run make kernel): %v", o.Kernel, err), false
	}
	if o.Dir == "" {
		o.Dir = GuestRepo
	}
	if o.MemMiB == 0 {
		o.MemMiB = envInt("SANDFS_LAB_MEM", 6144)
	}
	if o.CPUs == 0 {
		o.CPUs = envInt("SANDFS_LAB_CPUS", 2)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "lab: "+format+"\n", a...)
		}
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return res, fmt.Errorf("lab: qemu-system-x86_64 not found (apt-get install qemu-system-x86): %v", err), false
	}
	khz, src, err := HostTSCkHz()
	if err != nil {
		return res, err, false
	}
	logf("host TSC %d kHz (%s)", khz, src)

	run, err := os.MkdirTemp("", "sandfs-lab-")
	if err != nil {
		return res, fmt.Errorf("lab: mkdtemp: %v", err), false
	}
	defer os.RemoveAll(run)

	img, err := initramfs("/bin/busybox", &o)
	if err != nil {
		return res, err, false
	}
	initrd := filepath.Join(run, "initrd.cpio")
	if err := os.WriteFile(initrd, img, 0o600); err != nil {
		return res, fmt.Errorf("lab: write initrd: %v", err), false
	}

	// Host ends of the virtio-serial ports: QEMU connects to our sockets.
	type port struct {
		name string
		ln   *net.UnixListener
		w    io.Writer
		r    io.Reader
	}
	var status bytes.Buffer
	outCount := &countingWriter{w: o.Stdout}
	errCount := &countingWriter{w: o.Stderr}
	ports := []*port{{name: "stdout", w: outCount}, {name: "stderr", w: errCount}, {name: "status", w: &status}}
	if o.Stdin != nil {
		ports = append(ports, &port{name: "stdin", r: o.Stdin})
	}
	for _, p := range ports {
		path := filepath.Join(run, p.name+".sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return res, fmt.Errorf("lab: listen %q: %v", path, err), false
		}
		defer ln.Close()
		p.ln = ln
	}

	consolePath := ""
	var console io.Writer = o.Console
	if console == nil {
		dir := filepath.Join(CacheDir(), "lab")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			consolePath = filepath.Join(dir, fmt.Sprintf("console-%d.log", os.Getpid()))
		} else {
			consolePath = filepath.Join(run, "console.log")
		}
		f, err := os.Create(consolePath)
		if err != nil {
			return res, fmt.Errorf("lab: create console log: %v", err), false
		}
		defer f.Close()
		console = f
		res.ConsoleLog = consolePath
	}
	consoleTail := &tailbuf.Buffer{Max: 8192}
	console = io.MultiWriter(console, consoleTail)

	accel := "tcg"
	cpu := "max"
	if probe.Cached().Native {
		accel, cpu = "kvm", "host"
	}
	res.Accel = accel
	cmdline := strings.Join([]string{
		"console=ttyS0", "quiet", "panic=-1", "rdinit=/init",
		"tsc_early_khz=" + strconv.Itoa(khz),
		"random.trust_cpu=on", "8250.nr_uarts=1",
	}, " ")
	netdev := "user,id=n0"
	for _, f := range o.Forward {
		netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", f.Host, f.Guest)
	}
	accelArg := accel
	if accel == "tcg" {
		accelArg = "tcg,thread=multi"
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-M", "pc", "-accel", accelArg, "-cpu", cpu,
		"-smp", fmt.Sprintf("%d,sockets=%d", o.CPUs, o.CPUs),
		"-m", fmt.Sprintf("%dM", o.MemMiB),
		"-kernel", o.Kernel, "-initrd", initrd, "-append", cmdline,
		"-serial", "stdio", "-monitor", "none",
		"-virtfs", "local,path=" + o.Repo + ",mount_tag=sandfs,security_model=none,readonly=on,id=repo",
		"-netdev", netdev, "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-device", "virtio-rng-pci",
		"-device", "virtio-serial-pci,id=vser",
	}
	for i, p := range ports {
		args = append(args,
			"-chardev", fmt.Sprintf("socket,id=c%d,path=%s", i, p.ln.Addr().String()),
			"-device", fmt.Sprintf("virtserialport,bus=vser.0,chardev=c%d,name=sandfs.%s", i, p.name))
	}

	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	qc := exec.CommandContext(ctx, qemu, args...)
	qc.Stdin = nil
	qc.Stdout = console // -serial stdio: the kernel console
	var qerr bytes.Buffer
	qc.Stderr = io.MultiWriter(&qerr, consoleTail)
	qc.WaitDelay = 5 * time.Second
	logf("%s accel=%s smp=%d mem=%dMiB repo=%s", qemu, accel, o.CPUs, o.MemMiB, o.Repo)
	start := time.Now()
	if err := qc.Start(); err != nil {
		return res, fmt.Errorf("lab: start qemu: %v", err), false
	}

	var wg sync.WaitGroup
	conns := make(chan net.Conn, len(ports))
	for _, p := range ports {
		wg.Add(1)
		go func(p *port) {
			defer wg.Done()
			c, err := p.ln.AcceptUnix()
			if err != nil {
				return
			}
			conns <- c
			if p.r != nil {
				// EOF on our side reaches the guest as "host disconnected",
				// which its reads see as end of file.
				go func() { io.Copy(c, p.r); c.CloseWrite() }()
				io.Copy(io.Discard, c) // until QEMU exits
				c.Close()
				return
			}
			w := p.w
			if p.name == "status" {
				w = &statusWriter{buf: &status, onLine: func() { res.Boot = time.Since(start) }}
			}
			io.Copy(w, c)
			c.Close()
		}(p)
	}
	werr := qc.Wait()
	for _, p := range ports {
		p.ln.Close() // unblocks Accept if QEMU never connected
	}
	wg.Wait()
	close(conns)

	line := strings.TrimSpace(status.String())
	if n, ok := strings.CutPrefix(line, "status "); ok {
		if v, err := strconv.Atoi(n); err == nil {
			res.Status = v
			logf("command exited %d, %.1fs after qemu start", v, res.Boot.Seconds())
			if consolePath != "" { // success: keep only the latest console log
				last := filepath.Join(filepath.Dir(consolePath), "console-last.log")
				if os.Rename(consolePath, last) == nil {
					res.ConsoleLog = last
				}
			}
			return res, nil, false
		}
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ctx.Err() == nil && status.Len() == 0 && outCount.n.Load() == 0 && errCount.n.Load() == 0 {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			retry = true
		}
	}
	why := "qemu exited"
	if werr != nil {
		why = fmt.Sprintf("qemu: %v", werr)
	}
	if ctx.Err() != nil {
		why = fmt.Sprintf("%v (timeout %v)", ctx.Err(), o.Timeout)
	}
	return res, fmt.Errorf("%w: %s; last console output:\n%s", ErrNoStatus, why, consoleTail.String()), retry
}

type statusWriter struct {
	buf    *bytes.Buffer
	once   sync.Once
	onLine func()
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if bytes.IndexByte(p, '\n') >= 0 {
		s.once.Do(s.onLine)
	}
	return s.buf.Write(p)
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}
