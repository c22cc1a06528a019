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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	// StateDisk is a host image (OpenStateDisk's, locked by the caller)
	// attached as a virtio-blk drive with serial StateSerial; "" none.
	StateDisk string

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
	res, err := runOnce(ctx, o)
	var crash bootCrash
	if errors.As(err, &crash) && ctx.Err() == nil {
		if o.Log != nil || o.Stderr != nil {
			w := o.Stderr
			if w == nil {
				w = os.Stderr
			}
			fmt.Fprintf(w, "lab: %v; booting the lab again\n", firstLine(err))
		}
		res, err = runOnce(ctx, o)
	}
	return res, err
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// bootCrash is the ErrNoStatus of a boot where QEMU died of a signal we
// did not send before the command wrote anything: Run boots once more.
type bootCrash struct{ error }

func (e bootCrash) Unwrap() error { return e.error }

// runOnce boots the lab once: it writes the initramfs, opens the serial
// ports and the console log, runs QEMU until it exits and reads the
// command's status.
func runOnce(ctx context.Context, o Options) (Result, error) {
	var res Result
	if err := o.setDefaults(); err != nil {
		return res, err
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return res, fmt.Errorf("lab: qemu-system-x86_64 not found (apt-get install qemu-system-x86): %v", err)
	}
	khz, src, err := HostTSCkHz()
	if err != nil {
		return res, err
	}
	o.logf("host TSC %d kHz (%s)", khz, src)

	run, err := os.MkdirTemp("", "sandfs-lab-")
	if err != nil {
		return res, fmt.Errorf("lab: mkdtemp: %v", err)
	}
	defer os.RemoveAll(run)
	initrd, err := writeInitramfs(run, &o)
	if err != nil {
		return res, err
	}
	var status bytes.Buffer
	var start time.Time
	stdout, stderr := &countingWriter{w: o.Stdout}, &countingWriter{w: o.Stderr}
	ports := []*serialPort{{name: "stdout", w: stdout}, {name: "stderr", w: stderr},
		{name: "status", w: &statusWriter{buf: &status, onLine: func() { res.Boot = time.Since(start) }}}}
	if o.Stdin != nil {
		ports = append(ports, &serialPort{name: "stdin", r: o.Stdin})
	}
	defer closePorts(ports)
	if err := listenPorts(run, ports); err != nil {
		return res, err
	}
	con, err := openConsole(run, o.Console)
	if err != nil {
		return res, err
	}
	defer con.close()
	res.ConsoleLog = con.path

	accel, cpu := accelerator()
	res.Accel = accel
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	qc := exec.CommandContext(ctx, qemu, qemuArgs(&o, accel, cpu, khz, initrd, monitorSocket(run), ports)...)
	qc.Stdout = con // -serial stdio: the kernel console
	qc.Stderr = con.tail
	qc.WaitDelay = 5 * time.Second
	// Ended for its time or by its caller: where its CPUs stood first
	// (monitor.go), in the console log and, summed up, in the error.
	var cpus string
	qc.Cancel = func() error {
		dump := cpuDump(monitorSocket(run), o.CPUs)
		cpus = cpuSummary(dump)
		if con.file != nil {
			fmt.Fprintf(con.file, "\nlab: ended (%v); the lab's CPUs:\n%s", ctx.Err(), dump)
		}
		return qc.Process.Kill()
	}
	// Its own process group: a Ctrl-C at the terminal reaches this
	// process, which ends QEMU through ctx (lab serve first lets the
	// daemon inside stop), not QEMU directly.
	qc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	o.logf("%s accel=%s smp=%d mem=%dMiB repo=%s", qemu, accel, o.CPUs, o.MemMiB, o.Repo)
	start = time.Now()
	if err := qc.Start(); err != nil {
		return res, fmt.Errorf("lab: start qemu: %v", err)
	}
	werr := servePorts(ports, qc.Wait)

	if v, ok := parseStatus(status.String()); ok {
		res.Status = v
		o.logf("command exited %d, %.1fs after qemu start", v, res.Boot.Seconds())
		if last, ok := con.keepAsLast(); ok { // success: keep only the latest console log
			res.ConsoleLog = last
		}
		return res, nil
	}
	quiet := status.Len() == 0 && stdout.n.Load() == 0 && stderr.n.Load() == 0
	err = noStatus(ctx, werr, o.Timeout, quiet, con.tail.String())
	if cpus != "" { // set by qc.Cancel, which Wait (servePorts) waited for
		err = fmt.Errorf("%w\nthe lab's CPUs when it was ended: %s (registers and local APICs in %s)", err, cpus, res.ConsoleLog)
	}
	return res, err
}

// setDefaults checks o and fills in what it leaves out (see Options).
func (o *Options) setDefaults() error {
	if len(o.Args) == 0 {
		return errors.New("lab: no command")
	}
	if o.Repo == "" {
		r, err := FindRepo()
		if err != nil {
			return err
		}
		o.Repo = r
	}
	if o.Kernel == "" {
		o.Kernel = filepath.Join(o.Repo, "build", "vmlinuz")
	}
	if _, err := os.Stat(o.Kernel); err != nil {
		return fmt.Errorf("lab: kernel missing %q (run make kernel): %v", o.Kernel, err)
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
	return nil
}

// logf writes a progress line to o.Log, if any.
func (o *Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "lab: "+format+"\n", a...)
	}
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// parseStatus reads the "status N" line the lab's init writes to the
// status port.
func parseStatus(s string) (int, bool) {
	n, ok := strings.CutPrefix(strings.TrimSpace(s), "status ")
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(n)
	return v, err == nil
}

// noStatus is the error of a boot whose command reported no status:
// ErrNoStatus with the reason and the console's last output, as a
// bootCrash if QEMU died of a signal before the command wrote anything
// (quiet).
func noStatus(ctx context.Context, werr error, timeout time.Duration, quiet bool, consoleTail string) error {
	why := "qemu exited"
	if werr != nil {
		why = fmt.Sprintf("qemu: %v", werr)
	}
	if ctx.Err() != nil {
		why = fmt.Sprintf("%v (timeout %v)", ctx.Err(), timeout)
	}
	err := fmt.Errorf("%w: %s; last console output:\n%s", ErrNoStatus, why, consoleTail)
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ctx.Err() == nil && quiet {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return bootCrash{err}
		}
	}
	return err
}
