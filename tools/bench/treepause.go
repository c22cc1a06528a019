package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// treePauseResult is pause to disk and resume through the tree, of one
// idle sandbox.
type treePauseResult struct {
	pause, resume time.Duration // each one ctl write
	rssBefore     int64         // KiB: the VMM's Rss just before the pause (smaps_rollup)
	pssBefore     int64         // KiB: its Pss
	pidAfter      int           // the status's pid= while paused (0: no VMM)
	vmmGone       bool          // the VMM that ran before the pause has exited (within 10 s)
	goneAfter     time.Duration // how long after the pause's reply it was gone (polled every 2 ms)
	image         int64         // bytes allocated by the pause image's mem
}

// treePause pauses an idle sandbox (to disk), reads what it holds while
// paused, and resumes it.
func (r *run) treePause(d *daemon, id func() string) (*treePauseResult, error) {
	x := id()
	if _, err := d.newSandbox(x, ""); err != nil {
		return nil, err
	}
	defer d.c.Kill(x)
	time.Sleep(r.idle)
	ctl, errf, status := "sandboxes/"+x+"/ctl", "sandboxes/"+x+"/err", "sandboxes/"+x+"/status"
	pid, err := statusPid(d, status)
	if err != nil || pid == 0 {
		return nil, fmt.Errorf("pause: the running sandbox's pid: %d, %v", pid, err)
	}
	res := &treePauseResult{}
	roll, err := readRollup(pid)
	if err != nil {
		return nil, err
	}
	res.rssBefore, res.pssBefore = roll["Rss"], roll["Pss"]
	if res.pause, err = d.ctl(ctl, "pause", errf); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	if res.pidAfter, err = statusPid(d, status); err != nil {
		return nil, err
	}
	// The daemon does not wait for the killed VMM's end (the kernel
	// frees its memory meanwhile): how long after the reply it is gone.
	gone := now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			res.vmmGone, res.goneAfter = true, since(gone)
			break
		}
	}
	imgs, _ := filepath.Glob(filepath.Join(d.state, "run", x, "work", "snapshots", "_pause-*", "mem"))
	for _, m := range imgs {
		var st syscall.Stat_t
		if syscall.Stat(m, &st) == nil {
			res.image += st.Blocks * 512
		}
	}
	if res.resume, err = d.ctl(ctl, "resume", errf); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	r.progress("  pause (to disk) %s, resume %s; VMM Rss before %s, pid while paused %d (old VMM gone: %v, %s after), image %s",
		ms(res.pause), ms(res.resume), kib(res.rssBefore), res.pidAfter, res.vmmGone, ms(res.goneAfter), mib(res.image))
	return res, nil
}

// statusPid is the pid= field of a sandbox's status file.
func statusPid(d *daemon, path string) (int, error) {
	b, err := d.c.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no pid= in status %q", b)
}

// readRollup is pid's smaps_rollup totals, in KiB.
func readRollup(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := parseSmaps(f)
	if err != nil {
		return nil, err
	}
	if len(ms) != 1 {
		return nil, fmt.Errorf("smaps_rollup: %d entries", len(ms))
	}
	return ms[0].fields, nil
}

// add appends the pause rows to the tree's table.
func (p *treePauseResult) add(tb *table) {
	if p == nil {
		return
	}
	tb.add("`pause` of an idle sandbox (to disk: delta, disk layer synced, VMM killed; image "+mib(p.image)+")", ms(p.pause), "")
	tb.add("`resume` (restore of the image to agent answering)", ms(p.resume), "")
	gone := "its VMM was gone " + ms(p.goneAfter) + " after the pause's reply"
	if !p.vmmGone {
		gone = "its VMM still ran 10 s after the pause"
	}
	tb.notes = append(tb.notes, fmt.Sprintf("While paused the sandbox's status showed pid=%d (%s): its RAM went from the VMM's Rss %s (Pss %s) before the pause to none; it holds the image (%s) and its disk layer on disk.",
		p.pidAfter, gone, kib(p.rssBefore), kib(p.pssBefore), mib(p.image)))
}
