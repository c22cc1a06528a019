package bench

import (
	"flag"
	"fmt"
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
// 64-byte message over a unix socketpair, first between two threads of
// this process, then between this process and a child, alternating.
// A process switch costs more than a thread switch where the emulation
// flushes its TLB on an address-space change (the lab under TCG); this
// says how much more.

const hopMsg = 64

// hopMain is `sandfs bench hop [-n N] [-rounds R]`; with -child it is
// the child, echoing on fd 3.
func hopMain(args []string) int {
	fs := flag.NewFlagSet("bench hop", flag.ContinueOnError)
	n := fs.Int("n", 20000, "round trips per measurement")
	rounds := fs.Int("rounds", 3, "measurements of each kind, alternating")
	child := fs.Bool("child", false, "echo n messages on fd 3 (the benchmark's own child)")
	if err := fs.Parse(args); err != nil {
		return codeUsage
	}
	if *n < 1 || *n > 10_000_000 || *rounds < 1 || *rounds > 100 {
		fmt.Fprintln(os.Stderr, "bench hop: -n 1..10000000, -rounds 1..100")
		return codeUsage
	}
	if *child {
		if err := hopEcho(3, *n); err != nil {
			fmt.Fprintf(os.Stderr, "bench hop: child: %v\n", err)
			return codeError
		}
		return 0
	}
	clock := initClock()
	var threads, procs sample
	for i := 0; i < *rounds; i++ {
		t, err := hopThreads(*n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench hop: %v\n", err)
			return codeError
		}
		p, err := hopProcs(*n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench hop: %v\n", err)
			return codeError
		}
		fmt.Fprintf(os.Stderr, "round %d: threads %s, processes %s per round trip\n", i+1, us(t), us(p))
		threads, procs = append(threads, t), append(procs, p)
	}
	t, p := threads.median(), procs.median()
	fmt.Printf("| round trip of %d bytes over a unix socketpair (%d each, median of %d) | between two threads | between two processes | processes ÷ threads |\n|---|---|---|---|\n", hopMsg, *n, *rounds)
	fmt.Printf("| %d CPUs; %s | %s (%s) | %s (%s) | **%.2f** |\n", runtime.NumCPU(), clock, us(t), usSpread(threads), us(p), usSpread(procs), float64(p)/float64(t))
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
		echoed <- hopEcho(fds[1], n)
	}()
	d, err := hopPing(fds[0], n)
	if eerr := <-echoed; err == nil {
		err = eerr
	}
	return d, err
}

// hopProcs times n round trips between this process and a child's echo.
func hopProcs(n int) (time.Duration, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fds[0])
	end := os.NewFile(uintptr(fds[1]), "hop")
	c := exec.Command("/proc/self/exe", "bench", "hop", "-child", "-n", strconv.Itoa(n))
	c.ExtraFiles, c.Stderr = []*os.File{end}, os.Stderr
	err = c.Start()
	end.Close()
	if err != nil {
		return 0, err
	}
	d, err := hopPing(fds[0], n)
	if werr := c.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("child: %w", werr)
	}
	return d, err
}

// hopPing sends n messages on fd, each after the last came back, and
// returns the mean round trip.
func hopPing(fd, n int) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := make([]byte, hopMsg)
	t := now()
	for i := 0; i < n; i++ {
		if _, err := unix.Write(fd, b); err != nil {
			return 0, err
		}
		if m, err := unix.Read(fd, b); err != nil || m != hopMsg {
			return 0, fmt.Errorf("read %d bytes: %v", m, err)
		}
	}
	return since(t) / time.Duration(n), nil
}

// hopEcho sends back each of n messages on fd.
func hopEcho(fd, n int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := make([]byte, hopMsg)
	for i := 0; i < n; i++ {
		m, err := unix.Read(fd, b)
		if err != nil || m != hopMsg {
			return fmt.Errorf("echo: read %d bytes: %v", m, err)
		}
		if _, err := unix.Write(fd, b); err != nil {
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
