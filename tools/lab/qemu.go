package lab

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"sandfs/vmm/probe"
	"sandfs/vmm/tailbuf"
)

// serialPort is the host end of one virtio-serial port, named
// sandfs.<name> in the guest: QEMU connects to ln, and the guest's output
// on it goes to w, or r is the guest's input.
type serialPort struct {
	name string
	ln   *net.UnixListener
	w    io.Writer
	r    io.Reader
}

// listenPorts makes each port's socket in dir, for QEMU to connect to.
func listenPorts(dir string, ports []*serialPort) error {
	for _, p := range ports {
		path := filepath.Join(dir, p.name+".sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return fmt.Errorf("lab: listen %q: %v", path, err)
		}
		p.ln = ln
	}
	return nil
}

func closePorts(ports []*serialPort) {
	for _, p := range ports {
		if p.ln != nil {
			p.ln.Close()
		}
	}
}

// servePorts carries every port's data while QEMU runs; once wait
// (QEMU's) returns, it closes the listeners, waits for the ports to be
// done and returns wait's error.
func servePorts(ports []*serialPort, wait func() error) error {
	var wg sync.WaitGroup
	for _, p := range ports {
		wg.Go(p.serve)
	}
	err := wait()
	closePorts(ports) // unblocks Accept if QEMU never connected
	wg.Wait()
	return err
}

// serve carries one port's data until QEMU closes the connection.
func (p *serialPort) serve() {
	c, err := p.ln.AcceptUnix()
	if err != nil {
		return
	}
	defer c.Close()
	if p.r != nil {
		// EOF on our side reaches the guest as "host disconnected",
		// which its reads see as end of file.
		go func() { io.Copy(c, p.r); c.CloseWrite() }()
		io.Copy(io.Discard, c) // until QEMU exits
		return
	}
	io.Copy(p.w, c)
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

// statusWriter collects the status port's text and calls onLine once, at
// its first newline.
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

// console is where the kernel console goes: Options.Console or, without
// one, a log file (path) under the cache dir; and always tail, its last
// 8 KiB, for error messages.
type console struct {
	io.Writer
	path string
	file *os.File
	tail *tailbuf.Buffer
}

// openConsole opens the console for w (nil: a log file, in run if the
// cache dir cannot be made).
func openConsole(run string, w io.Writer) (*console, error) {
	c := &console{tail: &tailbuf.Buffer{Max: 8192}}
	if w == nil {
		dir := filepath.Join(CacheDir(), "lab")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			c.path = filepath.Join(dir, fmt.Sprintf("console-%d.log", os.Getpid()))
		} else {
			c.path = filepath.Join(run, "console.log")
		}
		f, err := os.Create(c.path)
		if err != nil {
			return nil, fmt.Errorf("lab: create console log: %v", err)
		}
		c.file, w = f, f
	}
	c.Writer = io.MultiWriter(w, c.tail)
	return c, nil
}

// keepAsLast renames the log file to console-last.log beside it and
// returns that path.
func (c *console) keepAsLast() (string, bool) {
	if c.path == "" {
		return "", false
	}
	last := filepath.Join(filepath.Dir(c.path), "console-last.log")
	return last, os.Rename(c.path, last) == nil
}

func (c *console) close() {
	if c.file != nil {
		c.file.Close()
	}
}

// accelerator is KVM with the host's CPU where this host runs guests
// natively, else TCG with -cpu max.
func accelerator() (accel, cpu string) {
	if probe.Cached().Native {
		return "kvm", "host"
	}
	return "tcg", "max"
}

// qemuArgs is QEMU's command line: the machine, the kernel (told the host
// TSC frequency) and initrd, the human monitor on the unix socket
// monitor (monitor.go), the repo share, user networking with o.Forward,
// and one virtio-serial port per port.
func qemuArgs(o *Options, accel, cpu string, khz int, initrd, monitor string, ports []*serialPort) []string {
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
		"-serial", "stdio", "-monitor", "unix:" + strings.ReplaceAll(monitor, ",", ",,") + ",server=on,wait=off",
		"-virtfs", "local,path=" + o.Repo + ",mount_tag=sandfs,security_model=none,readonly=on,id=repo",
		"-netdev", netdev, "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-device", "virtio-rng-pci",
		"-device", "virtio-serial-pci,id=vser",
	}
	if o.StateDisk != "" {
		args = append(args, "-drive", "if=none,id=state,format=raw,cache=writeback,discard=unmap,file="+strings.ReplaceAll(o.StateDisk, ",", ",,"),
			"-device", "virtio-blk-pci,drive=state,serial="+StateSerial)
	}
	for i, p := range ports {
		args = append(args,
			"-chardev", fmt.Sprintf("socket,id=c%d,path=%s", i, p.ln.Addr().String()),
			"-device", fmt.Sprintf("virtserialport,bus=vser.0,chardev=c%d,name=sandfs.%s", i, p.name))
	}
	return args
}
