// Command sandfs-init is PID 1 in a sandfs guest: it mounts the pseudo
// file systems, sets the clock, host name and network from the kernel
// command line (see guest.ParseCmdline), makes sure the users root and
// user exist, reaps zombies, and serves the guest agent's 9P tree
// (procs/, fs/) on vsock port 564.
//
// Run as anything but PID 1 (for testing on a host) it skips the init
// duties unless -init is given, and -listen picks the transport:
//
//	sandfs-init -listen unix:/tmp/agent.sock -root /tmp/root
//
// An image builder can add the users ahead of boot (saving the first
// boot's /etc writes):
//
//	sandfs-init -users /path/to/image/tree
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"sandfs/guest"
	"sandfs/vmm/virtio/vsock/hybrid"
)

func main() {
	pid1 := os.Getpid() == 1
	doInit := flag.Bool("init", pid1, "do the init duties (mounts, clock, hostname, network, users)")
	listen := flag.String("listen", "vsock", `"vsock" (port from sandfs.port, default 564), "vsock:PORT" or "unix:PATH"`)
	root := flag.String("root", "/", "directory served as fs/")
	users := flag.String("users", "", "only add root and user to `DIR`/etc (for image builds), then exit")
	if !pid1 {
		flag.Parse()
	}
	log.SetFlags(0)
	log.SetPrefix("sandfs-init: ")
	if *users != "" {
		if err := guest.EnsureUsers(*users); err != nil {
			log.Fatal(err)
		}
		return
	}

	cfg := guest.Config{Port: hybrid.AgentPort}
	if *doInit {
		cfg = initDuties()
	}
	if pid1 {
		go pid1Signals()
	}
	opt := guest.Options{Debug: cfg.Debug}
	srv := guest.NewServer(*root, opt)
	if *listen == "vsock" {
		// Listening before the 9P port is: a template's snapshot, taken
		// once the host reaches the agent on 9P, has both.
		l, err := vsock.Listen(hybrid.CtlPort, nil)
		go serveCtlLines(srv, l, err)
	}
	for fails := 0; ; {
		l, err := listener(*listen, cfg.Port)
		if err != nil {
			if fails%30 == 0 {
				log.Printf("listen %s: %v (retrying every second)", *listen, err)
			}
			fails++
			if !pid1 {
				os.Exit(1)
			}
			time.Sleep(time.Second)
			continue
		}
		fails = 0
		log.Printf("serving 9P on %s", l.Addr())
		err = srv.Serve(l)
		l.Close()
		log.Printf("serve: %v", err)
		if !pid1 {
			os.Exit(1)
		}
		time.Sleep(time.Second) // PID 1 must never exit
	}
}

// serveCtlLines serves /ctl's messages as lines on hybrid.CtlPort
// (guest.Server.ServeCtlLines) on l (or, after err, a listener of its
// own), from the host only. Without it the host writes them through 9P,
// as to an agent that predates the port.
func serveCtlLines(srv *guest.Server, l *vsock.Listener, err error) {
	for {
		if err == nil {
			err = srv.ServeCtlLines(hostOnly{l})
			l.Close()
		}
		log.Printf("ctl lines on vsock port %d: %v (again in a second)", hybrid.CtlPort, err)
		time.Sleep(time.Second)
		l, err = vsock.Listen(hybrid.CtlPort, nil)
	}
}

func listener(spec string, port uint32) (net.Listener, error) {
	switch {
	case spec == "vsock":
		l, err := vsock.Listen(port, nil)
		return hostOnly{l}, err
	case strings.HasPrefix(spec, "vsock:"):
		var p uint32
		if _, err := fmt.Sscanf(spec, "vsock:%d", &p); err != nil {
			return nil, fmt.Errorf("bad port in %q", spec)
		}
		l, err := vsock.Listen(p, nil)
		return hostOnly{l}, err
	case strings.HasPrefix(spec, "unix:"):
		path := strings.TrimPrefix(spec, "unix:")
		os.Remove(path)
		return net.Listen("unix", path)
	}
	return nil, fmt.Errorf("unknown listener %q", spec)
}

// hostOnly accepts vsock connections from the host (CID 2) only: a guest
// process reaching port 564 over vsock loopback (CID 1) or another CID
// would otherwise drive procs/ as root.
type hostOnly struct{ *vsock.Listener }

func (l hostOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.RemoteAddr().(*vsock.Addr); ok && a.ContextID == vsock.Host {
			return c, nil
		}
		log.Printf("refusing vsock connection from %v: not the host", c.RemoteAddr())
		c.Close()
	}
}

// initDuties does PID 1's set-up. Failures are logged and skipped: a
// guest with no network is still worth serving. The log line gives each
// step's time.
func initDuties() guest.Config {
	t0 := time.Now()
	var times []string
	step := func(name string, f func() error) {
		t := time.Now()
		if err := f(); err != nil {
			log.Print(err)
		}
		times = append(times, fmt.Sprintf("%s=%v", name, time.Since(t).Round(time.Millisecond)))
	}
	var cfg guest.Config
	step("mounts", func() error { err := guest.Mounts(); console(); return err })
	step("cmdline", func() error {
		b, err := os.ReadFile("/proc/cmdline")
		var errs []error
		cfg, errs = guest.ParseCmdline(string(b))
		for _, e := range errs {
			log.Print(e)
		}
		return err
	})
	step("clock", func() error { return guest.SetClock(cfg) })
	step("hostname", func() error { return guest.SetHostname(cfg, "/") })
	step("network", func() error { return guest.Network(cfg, "/") })
	step("users", func() error { return guest.EnsureUsers("/") })
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	log.Printf("init done in %v (%s)", time.Since(t0).Round(time.Millisecond), strings.Join(times, " "))
	return cfg
}

// console makes sure fds 0, 1 and 2 are open, on /dev/console: the kernel
// opens it for init only if the root file system has /dev/console, which
// a freshly built image may not (devtmpfs is mounted by Mounts).
func console() {
	if _, err := unix.FcntlInt(1, unix.F_GETFD, 0); err == nil {
		return
	}
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return
	}
	for i := 0; i < 3; i++ {
		if i != fd {
			unix.Dup2(fd, i)
		}
	}
	if fd > 2 {
		unix.Close(fd)
	}
}

// pid1Signals handles the signals a PID 1 gets: SIGTERM and SIGPWR power
// the guest off (after TERM, then KILL, to everything else); SIGINT
// (ctrl-alt-del) reboots; SIGUSR1 writes every goroutine's stack to the
// console (to see where a wedged agent waits: `kill -USR1 1` in the
// guest, e.g. through a second exec). The kernel delivers only signals PID 1 handles,
// and the Go runtime handles all, so each one must be caught here, and
// none may be ignored (ignored dispositions survive exec into children).
func pid1Signals() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, unix.SIGTERM, unix.SIGPWR, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2)
	for s := range ch {
		switch s {
		case unix.SIGTERM, unix.SIGPWR:
			shutdown(unix.LINUX_REBOOT_CMD_POWER_OFF)
		case unix.SIGINT:
			shutdown(unix.LINUX_REBOOT_CMD_RESTART)
		case unix.SIGUSR1:
			buf := make([]byte, 1<<20)
			log.Printf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		default:
			log.Printf("ignoring %v", s)
		}
	}
}

func shutdown(cmd int) {
	log.Printf("shutting down")
	syscall.Kill(-1, syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	syscall.Kill(-1, syscall.SIGKILL)
	unix.Sync()
	if err := unix.Reboot(cmd); err != nil {
		log.Printf("reboot: %v", err)
	}
}
