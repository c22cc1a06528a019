package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stallAfter is how long a guest measuring for `bench worlds` may print
// nothing before the run is taken as stalled: its slowest row took 15 s
// on a quiet lab (2026-12-03), and a loaded lab's rows ran 5 to 10 times
// slower than a quiet one's (docs/bench/worlds.md, the 08:31 run), so a
// guest quiet for longer has stopped (a stall of the nested guest, or a
// request nobody answers), and the run ends with what was going on, not
// at the hour's timeout with nothing.
const stallAfter = 5 * time.Minute

// stallWatch calls stalled, once, when touch has not been called for
// after (from the watch's start).
type stallWatch struct {
	mu   sync.Mutex
	last time.Time
	stop chan struct{}
	done chan struct{}
}

func watchStall(after time.Duration, stalled func(quiet time.Duration)) *stallWatch {
	w := &stallWatch{last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(min(after/10, 10*time.Second))
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			w.mu.Lock()
			quiet := time.Since(w.last)
			w.mu.Unlock()
			if quiet >= after {
				stalled(quiet)
				return
			}
		}
	}()
	return w
}

// touch records progress.
func (w *stallWatch) touch() {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

// close ends the watch and waits for a stalled call under way.
func (w *stallWatch) close() {
	close(w.stop)
	<-w.done
}

// stalled records where sandbox id and the daemon stood when the guest
// stopped printing, on the progress log: the VMM's SIGUSR1 dump (its
// devices' queues and requests in flight, each vCPU's RIP and interrupt
// state; the daemon runs VMMs with virtio.DebugEnv) and the daemon's
// goroutines that were in the 9P server or a world (SIGQUIT: the daemon
// ends, and with it the guest's command and the run).
func (r *run) stalled(d *daemon, id string, quiet time.Duration) {
	r.progress("STALL: sandbox %s's guest printed nothing for %s; its VMM's dump and the daemon's goroutines follow", id, quiet.Round(time.Second))
	vmmLog := filepath.Join(r.h.dir, "state", "run", id, "vmm.log")
	var before int64
	if fi, err := os.Stat(vmmLog); err == nil {
		before = fi.Size()
	}
	if pid, err := statusPid(d, "sandboxes/"+id+"/status"); err != nil {
		r.progress("STALL: no VMM pid: %v", err)
	} else if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		r.progress("STALL: SIGUSR1 to the VMM (pid %d): %v", pid, err)
	}
	time.Sleep(2 * time.Second)
	if b, err := os.ReadFile(vmmLog); err != nil {
		r.progress("STALL: %v", err)
	} else {
		r.progress("STALL: the VMM's dump:\n%s", tail(b[min(int64(len(b)), before):]))
	}
	d.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-d.ended:
	case <-time.After(10 * time.Second):
	}
	b, _ := os.ReadFile(d.log)
	r.progress("STALL: the daemon's goroutines in the 9P server or a world:\n%s", servingStacks(b, 40))
}

// servingStacks returns the goroutine stacks of a Go traceback that pass
// through the 9P server or a world, at most max of them.
func servingStacks(dump []byte, max int) string {
	var out []string
	for _, g := range bytes.Split(dump, []byte("\n\n")) {
		s := string(g)
		if strings.HasPrefix(s, "goroutine ") && (strings.Contains(s, "sandfs/fs/ninep") || strings.Contains(s, "sandfs/world") || strings.Contains(s, "hugelgupf/p9")) {
			out = append(out, s)
		}
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("(%d more)", len(out)-max))
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, "\n\n")
}
