package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"sandfs/fs/client"
	"sandfs/vmm/virtio"
)

// treeResult is what the daemon's tree measured: every figure is a write
// to a ctl file that returns once the operation is done.
type treeResult struct {
	first            time.Duration // the first new of the shape: builds the template snapshot
	new1             sample        // new template=base, one at a time
	newC             map[int]time.Duration
	concs            []int
	snapFull         time.Duration // snapshot s1 of a running sandbox (the machine's first: full)
	snapD            time.Duration // snapshot s2 (a delta over s1)
	rollback         time.Duration // rollback s1
	from1            time.Duration // new from=s1
	clone1           time.Duration // clone (one)
	cloneN           time.Duration // clone cloneNum concurrency=cloneC
	cloneNum, cloneC int
	pause            *treePauseResult
}

// daemon is `sandfs serve` (this binary) on a state directory of the
// scratch directory, and a client of its unix socket. Each daemon of a
// run has a state directory of its own ("state", then "state2", ...):
// a daemon keeps its sandboxes' records, so a second one on the same
// directory (the tree's part measured once more after a lab fault)
// found the first one's sandboxes, and its first `new b1` failed.
type daemon struct {
	cmd   *exec.Cmd
	ended chan struct{}
	addr  string
	state string // its state directory
	log   string // its stdout and stderr
	c     *client.Client
}

// startDaemon starts the daemon (as ctl's runtime runs VMMs as root:
// jailed) and dials it.
func (r *run) startDaemon(ctx context.Context) (*daemon, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r.daemons++
	n := ""
	if r.daemons > 1 {
		n = strconv.Itoa(r.daemons)
	}
	state, sock := filepath.Join(r.h.dir, "state"+n), filepath.Join(r.h.dir, "d"+n+".sock")
	log, err := os.Create(filepath.Join(r.h.dir, "daemon"+n+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(self, "serve", "-mount", "", "-state", state, "-listen", "unix:"+sock,
		"-kernel", r.h.kernel, "-templates", filepath.Dir(r.h.rootfs))
	cmd.Stdout, cmd.Stderr = log, log
	// Its VMMs dump their devices and vCPUs on SIGUSR1 (a stalled run's
	// record: stall.go); nothing else changes.
	cmd.Env = append(os.Environ(), virtio.DebugEnv+"=1")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{cmd: cmd, ended: make(chan struct{}), addr: "unix:" + sock, state: state, log: log.Name()}
	go func() { cmd.Wait(); close(d.ended) }()
	for {
		if d.c, err = client.Dial(ctx, d.addr, ""); err == nil {
			return d, nil
		}
		select {
		case <-d.ended:
			b, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("daemon ended: %s", tail(b))
		case <-ctx.Done():
			d.stop()
			return nil, fmt.Errorf("daemon: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the daemon with SIGTERM (its sandboxes go with it), then
// SIGKILL after a minute.
func (d *daemon) stop() {
	if d.c != nil {
		d.c.Close()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.ended:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-d.ended
	}
}

// ctl writes msg to path and returns how long the write took.
func (d *daemon) ctl(path, msg, errPath string) (time.Duration, error) {
	start := now()
	err := d.c.WriteMsg(path, msg, errPath)
	return since(start), err
}

func (d *daemon) newSandbox(id, extra string) (time.Duration, error) {
	return d.ctl("ctl", "new "+id+" template=base "+extra, "err")
}

// benchTree measures through the daemon's tree: new template=base one at
// a time and at each concurrency of concs, then snapshot, rollback and
// new from= of one sandbox.
func (r *run) benchTree(ctx context.Context, concs []int) (_ *treeResult, err error) {
	d, err := r.startDaemon(ctx)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	defer func() {
		// The scratch directory goes with the run: what the daemon
		// logged of a failure is kept only here.
		if err != nil {
			b, _ := os.ReadFile(d.log)
			r.progress("  the daemon's log, its end:\n%s", tailN(b, 6000))
			if at, ok := labStallIn(b, "/proc/kallsyms"); ok {
				err = fmt.Errorf("%w (the lab's stall: a guest's vCPU at %s)", err, at)
			}
		}
	}()
	res := &treeResult{newC: map[int]time.Duration{}, concs: concs}
	seq := 0
	id := func() string { seq++; return "b" + strconv.Itoa(seq) }
	kill := func(ids []string) {
		parallel(len(ids), func(i int) error { return d.c.Kill(ids[i]) })
	}
	first := id()
	if res.first, err = d.newSandbox(first, ""); err != nil {
		return nil, fmt.Errorf("first new: %w", err)
	}
	r.progress("  first new (template snapshot built): %s", ms(res.first))
	kill([]string{first})
	for i := 0; i < r.n; i++ {
		x := id()
		t, err := d.newSandbox(x, "")
		if err != nil {
			return nil, err
		}
		res.new1 = append(res.new1, t)
		kill([]string{x})
	}
	r.progress("  new c=1: median %s (%s)", ms(res.new1.median()), res.new1.spread())
	for _, c := range concs {
		ids := make([]string, c)
		for i := range ids {
			ids[i] = id()
		}
		// One connection per client, as c users would have.
		wall, err := parallel(c, func(i int) error {
			cl, err := client.Dial(ctx, d.addr, "")
			if err != nil {
				return err
			}
			defer cl.Close()
			return cl.WriteMsg("ctl", "new "+ids[i]+" template=base", "err")
		})
		kill(ids)
		if err != nil {
			return nil, fmt.Errorf("new c=%d: %w", c, err)
		}
		res.newC[c] = wall
		r.progress("  new c=%d: wall %s", c, ms(wall))
	}
	return res, r.treeSnapshots(d, id, res)
}

// treeSnapshots times snapshot (full, then delta), rollback and new
// from= on one sandbox.
func (r *run) treeSnapshots(d *daemon, id func() string, res *treeResult) error {
	x := id()
	if _, err := d.newSandbox(x, ""); err != nil {
		return err
	}
	ctl, errf := "sandboxes/"+x+"/ctl", "sandboxes/"+x+"/err"
	var err error
	if res.snapFull, err = d.ctl(ctl, "snapshot s1", errf); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if res.snapD, err = d.ctl(ctl, "snapshot s2", errf); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if res.rollback, err = d.ctl(ctl, "rollback s1", errf); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	y := id()
	if res.from1, err = d.ctl("ctl", "new "+y+" from=s1", "err"); err != nil {
		return fmt.Errorf("new from=s1: %w", err)
	}
	r.progress("  snapshot full %s, delta %s, rollback %s, new from= %s", ms(res.snapFull), ms(res.snapD), ms(res.rollback), ms(res.from1))
	keep := map[string]bool{x: true}
	killOthers := func() error {
		ents, err := d.c.ReadDir("sandboxes")
		if err != nil {
			return err
		}
		var ids []string
		for _, e := range ents {
			if !keep[e.Name] {
				ids = append(ids, e.Name)
			}
		}
		parallel(len(ids), func(i int) error { return d.c.Kill(ids[i]) })
		return nil
	}
	if err := killOthers(); err != nil {
		return err
	}
	if res.clone1, err = d.ctl(ctl, "clone", errf); err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	if err := killOthers(); err != nil {
		return err
	}
	res.cloneNum, res.cloneC = 20, 10
	if res.cloneN, err = d.ctl(ctl, fmt.Sprintf("clone %d concurrency=%d", res.cloneNum, res.cloneC), errf); err != nil {
		return fmt.Errorf("clone %d: %w", res.cloneNum, err)
	}
	r.progress("  clone %s, clone %d concurrency=%d %s", ms(res.clone1), res.cloneNum, res.cloneC, ms(res.cloneN))
	if err := killOthers(); err != nil {
		return err
	}
	res.pause, err = r.treePause(d, id)
	return err
}

// treeTable is the table of the daemon's figures.
func treeTable(t *treeResult) *table {
	tb := &table{title: "Through the tree (sandfs serve, jailed VMMs, 256 MiB guests): each figure is one ctl write, returning when done",
		head: []string{"operation", "time", "per sandbox"}}
	tb.add("first `new template=base` (cold boot, template snapshot, restore)", ms(t.first), "")
	tb.add("`new template=base`, c=1 (median)", ms(t.new1.median()), t.new1.spread()+" ms")
	for _, c := range t.concs {
		tb.add(fmt.Sprintf("`new template=base`, c=%d (wall)", c), ms(t.newC[c]), ms(t.newC[c]/time.Duration(c)))
	}
	tb.add("`snapshot s1` of a running sandbox (its first: full)", ms(t.snapFull), "")
	tb.add("`snapshot s2` (delta over s1)", ms(t.snapD), "")
	tb.add("`rollback s1`", ms(t.rollback), "")
	tb.add("`new from=s1`", ms(t.from1), "")
	tb.add("`clone` (a snapshot, then one new from it)", ms(t.clone1), "")
	tb.add(fmt.Sprintf("`clone %d concurrency=%d` (wall)", t.cloneNum, t.cloneC), ms(t.cloneN), ms(t.cloneN/time.Duration(max(1, t.cloneNum))))
	t.pause.add(tb)
	tb.notes = append(tb.notes, "A `new` returns once the sandbox runs and its agent took the host's entropy, hostname and clock (docs/snapshots.md).")
	return tb
}
