package guest

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper is the process's one caller of wait4(-1): as PID 1 it must reap
// every zombie (orphans re-parented to it included), and it must hand the
// exit status of the processes the agent started to their records instead
// of dropping it. Processes are started through reaper.start, which forks
// and registers the pid under mu, so the SIGCHLD loop (which also takes mu
// around wait4) can never reap a child before its record is known.
//
// Nothing else in the program may wait for children (no os/exec Wait):
// the reaper would steal their status.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]func(unix.WaitStatus) // guarded by mu
}

var (
	theReaper     *reaper
	theReaperOnce sync.Once
)

// getReaper returns the process-wide reaper, starting its SIGCHLD loop on
// first use.
func getReaper() *reaper {
	theReaperOnce.Do(func() {
		theReaper = &reaper{waiters: map[int]func(unix.WaitStatus){}}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			for range ch {
				theReaper.reap()
			}
		}()
	})
	return theReaper
}

// reap collects every exited child without blocking and dispatches the
// statuses of registered pids; other children (orphans) are just reaped.
func (r *reaper) reap() {
	var done []func()
	r.mu.Lock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			break
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		if f, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			done = append(done, func() { f(ws) })
		}
	}
	r.mu.Unlock()
	for _, f := range done {
		f()
	}
}

// start forks and execs argv0 with attr and registers onExit for the
// child's exit status, atomically with respect to reap.
func (r *reaper) start(argv0 string, argv []string, attr *syscall.ProcAttr, onExit func(unix.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = onExit
	return pid, nil
}
