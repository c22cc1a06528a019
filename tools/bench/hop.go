package bench

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// `sandfs bench hop`: what one hop between two parties costs on this
// host, as a world's 9P request pays it between the VMM and the daemon
// (docs/worlds.md, "Where a request's time goes"): the round trip of a
// 64-byte message over a unix socketpair between two threads of this
// process, between this process and a child (blocking system calls on
// one thread each), and between the two through net.Conns (Go's
// netpoller, as the VMM and the daemon talk), alternating: how much
// more a process switch costs than a thread switch on this host.

const hopMsg = 64

// hopKinds are the hops measured, in the order they alternate.
var hopKinds = []struct {
	name string
	run  func(n int) (time.Duration, error)
}{
	{"two threads", hopThreads},
	{"two processes", func(n int) (time.Duration, error) { return hopProcs(n, false) }},
	{"two processes, Go's netpoller", func(n int) (time.Duration, error) { return hopProcs(n, true) }},
}

// hopMain is `sandfs bench hop [-n N] [-rounds R]`; with -child it is
// the child, echoing on fd 3 (through a net.Conn with -netpoll).
func hopMain(args []string) int {
	fs := flag.NewFlagSet("bench hop", flag.ContinueOnError)
	n := fs.Int("n", 20000, "round trips per measurement")
	rounds := fs.Int("rounds", 3, "measurements of each kind, alternating")
	child := fs.Bool("child", false, "echo n messages on fd 3 (the benchmark's own child)")
	netpoll := fs.Bool("netpoll", false, "with -child: echo through a net.Conn")
	if err := fs.Parse(args); err != nil {
		return codeUsage
	}
	if *n < 1 || *n > 10_000_000 || *rounds < 1 || *rounds > 100 {
		fmt.Fprintln(os.Stderr, "bench hop: -n 1..10000000, -rounds 1..100")
		return codeUsage
	}
	if *child {
		if err := hopEchoOn(3, *netpoll, *n); err != nil {
			fmt.Fprintf(os.Stderr, "bench hop: child: %v\n", err)
			return codeError
		}
		return 0
	}
	clock := initClock()
	got := make([]sample, len(hopKinds))
	for i := 0; i < *rounds; i++ {
		line := fmt.Sprintf("round %d:", i+1)
		for k, h := range hopKinds {
			d, err := h.run(*n)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench hop: %s: %v\n", h.name, err)
				return codeError
			}
			got[k] = append(got[k], d)
			line += fmt.Sprintf(" %s %s;", h.name, us(d))
		}
		fmt.Fprintln(os.Stderr, line)
	}
	fmt.Printf("Round trip of %d bytes over a unix socketpair, %d each, median (min-max) of %d rounds; %d CPUs; %s.\n\n", hopMsg, *n, *rounds, runtime.NumCPU(), clock)
	fmt.Printf("| between | round trip | ÷ two threads |\n|---|---|---|\n")
	for k, h := range hopKinds {
		fmt.Printf("| %s | %s (%s) | %.2f |\n", h.name, us(got[k].median()), usSpread(got[k]), float64(got[k].median())/float64(got[0].median()))
	}
	return 0
}

// hopThreads times n round trips between this goroutine's thread and
// another thread's echo.
func hopThreads(n int) (time.Duration, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fds[0])
	echoed := make(chan error, 1)
	go func() {
		defer unix.Close(fds[1])
		echoed <- hopEchoOn(fds[1], false, n)
	}()
	d, err := hopPingOn(fds[0], false, n)
	if eerr := <-echoed; err == nil {
		err = eerr
	}
	return d, err
}

// hopProcs times n round trips between this process and a child's echo:
// with netpoll, both ends read and write through a net.Conn (Go's
// netpoller, as the VMM and the daemon talk), else with blocking system
// calls on one thread each.
func hopProcs(n int, netpoll bool) (time.Duration, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fds[0])
	end := os.NewFile(uintptr(fds[1]), "hop")
	args := []string{"bench", "hop", "-child", "-n", strconv.Itoa(n)}
	if netpoll {
		args = append(args, "-netpoll")
	}
	c := exec.Command("/proc/self/exe", args...)
	c.ExtraFiles, c.Stderr = []*os.File{end}, os.Stderr
	err = c.Start()
	end.Close()
	if err != nil {
		return 0, err
	}
	d, err := hopPingOn(fds[0], netpoll, n)
	if werr := c.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("child: %w", werr)
	}
	return d, err
}

// hopPingOn and hopEchoOn are the two ends of a hop on fd: with
// netpoll through a net.Conn of its own (on a duplicate of fd: fd stays
// the caller's), else with blocking system calls on this goroutine's
// thread, locked to it.
func hopPingOn(fd int, netpoll bool, n int) (time.Duration, error) {
	var d time.Duration
	err := hopOn(fd, netpoll, func(rw io.ReadWriter) (err error) {
		d, err = hopPing(rw, n)
		return err
	})
	return d, err
}

func hopEchoOn(fd int, netpoll bool, n int) error {
	return hopOn(fd, netpoll, func(rw io.ReadWriter) error { return hopEcho(rw, n) })
}

func hopOn(fd int, netpoll bool, f func(io.ReadWriter) error) error {
	if !netpoll {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		return f(fdRW(fd))
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(dup), "hop")
	c, err := net.FileConn(file)
	file.Close()
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// fdRW reads and writes a descriptor with plain system calls.
type fdRW int

func (fd fdRW) Read(b []byte) (int, error)  { return unix.Read(int(fd), b) }
func (fd fdRW) Write(b []byte) (int, error) { return unix.Write(int(fd), b) }

// hopPing sends n messages on rw, each after the last came back, and
// returns the mean round trip.
func hopPing(rw io.ReadWriter, n int) (time.Duration, error) {
	b := make([]byte, hopMsg)
	t := now()
	for i := 0; i < n; i++ {
		if _, err := rw.Write(b); err != nil {
			return 0, err
		}
		if m, err := rw.Read(b); err != nil || m != hopMsg {
			return 0, fmt.Errorf("read %d bytes: %v", m, err)
		}
	}
	return since(t) / time.Duration(n), nil
}

// hopEcho sends back each of n messages on rw.
func hopEcho(rw io.ReadWriter, n int) error {
	b := make([]byte, hopMsg)
	for i := 0; i < n; i++ {
		m, err := rw.Read(b)
		if err != nil || m != hopMsg {
			return fmt.Errorf("echo: read %d bytes: %v", m, err)
		}
		if _, err := rw.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }

// usSpread is "min-max" of s in µs.
func usSpread(s sample) string {
	c := s.sorted()
	return fmt.Sprintf("%.1f-%.1f", float64(c[0])/1e3, float64(c[len(c)-1])/1e3)
}
