package guestlab

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
)

// TestDaemonRestart: sandboxes outlive their daemon. Three sandboxes: r
// (running) and p (paused) each hold a file and a background process in
// the guest; the daemon is killed with SIGKILL; meanwhile k's VMM is
// killed too. p is paused to disk: its VMM has ended (pid=0). The
// restarted daemon shows r running and p paused with the same status
// lines (same VMM pid for r), and both guests still have their file and
// process (p after resume, restored from its image); k is dead with the
// reason in err. r is snapshotted (a delta over its template's snapshot:
// the adopted machine's restore is known) and rolled back. Then r is
// paused, the daemon stopped with SIGTERM and started again, and r
// resumes with its file and process; its snapshot is still listed.
func TestDaemonRestart(t *testing.T) {
	need(t)
	start := time.Now()
	d := startDaemon(t)
	t.Logf("daemon up: serving its mount %v after its start (no sandboxes)", time.Since(start).Round(time.Millisecond))
	const mark = `sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > /root/sleep.pid; echo hello-$(hostname) > /root/marker`
	for _, id := range []string{"r", "p", "k"} {
		d.mustSh(t, "echo 'new "+id+"' > ctl")
		d.waitAgent(t, id)
		t.Logf("%s: agent serving", id)
	}
	for _, id := range []string{"r", "p"} {
		d.mustSh(t, "echo '"+mark+"' > sandboxes/"+id+"/exec; cat sandboxes/"+id+"/exec")
		d.checkGuest(t, id)
	}
	pVMM := statusPid(t, d.mustSh(t, "cat sandboxes/p/status"))
	d.mustSh(t, "echo pause > sandboxes/p/ctl")
	before := map[string]string{}
	for _, id := range []string{"r", "p", "k"} {
		before[id] = d.mustSh(t, "cat sandboxes/"+id+"/status")
	}
	// The pause returns once the image is saved and the VMM is killed;
	// its process is gone once the kernel has torn down its memory, in
	// the lab up to hundreds of milliseconds later (a CI run saw it
	// still running right after the pause's reply).
	for end := time.Now().Add(10 * time.Second); testenv.Running(pVMM) && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(before["p"], "p paused ") || !strings.Contains(before["p"], " pid=0 ") || testenv.Running(pVMM) {
		t.Fatalf("p after pause: status %q, its VMM pid %d running %v 10 s after; want paused to disk (pid=0, VMM ended)", before["p"], pVMM, testenv.Running(pVMM))
	}

	d.stop(syscall.SIGKILL)
	t.Log("daemon killed (SIGKILL)")
	if pid := statusPid(t, before["r"]); !testenv.Running(pid) {
		t.Fatalf("r: VMM pid %d did not outlive the daemon", pid)
	}
	killWait(t, statusPid(t, before["k"]))
	start = time.Now()
	d.serve(t)
	t.Logf("daemon restarted: serving its mount %v after its start (1 sandbox adopted, 1 on disk, 1 reaped)", time.Since(start).Round(time.Millisecond))

	for _, id := range []string{"r", "p"} {
		if got := d.mustSh(t, "cat sandboxes/"+id+"/status"); got != before[id] {
			t.Errorf("%s: status after the restart = %q; want %q", id, got, before[id])
		}
	}
	d.checkGuest(t, "r")
	// The adopted VMM's stderr reaches its vmm.log again (the new
	// daemon reads its named pipe): its SIGUSR1 virtio dump is there,
	// which a failed test's dumpState asks for.
	rlog := filepath.Join(d.dir, "st/run/r/vmm.log")
	logged, _ := os.ReadFile(rlog)
	if err := syscall.Kill(statusPid(t, before["r"]), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	logHas(t, rlog, len(logged), "vsock: conns=")
	// An adopted machine snapshots (a delta over the template snapshot
	// it was restored from) and rolls back (a new VMM, which the next
	// restart adopts).
	d.mustSh(t, "echo snapshot s1 > sandboxes/r/ctl; echo rollback s1 > sandboxes/r/ctl")
	d.checkGuest(t, "r")
	d.mustSh(t, "echo resume > sandboxes/p/ctl")
	d.checkGuest(t, "p")
	if st := d.mustSh(t, "cat sandboxes/k/status"); !strings.HasPrefix(st, "k dead ") {
		t.Errorf("k (VMM killed while the daemon was down): status %q; want dead", st)
	}
	if e := d.mustSh(t, "cat sandboxes/k/err"); !strings.HasPrefix(e, "daemon restarted: ") {
		t.Errorf("k: err %q; want the reason after \"daemon restarted: \"", e)
	} else {
		t.Logf("k: err %q", e)
	}

	d.mustSh(t, "echo pause > sandboxes/r/ctl")
	d.stop(syscall.SIGTERM)
	d.serve(t)
	t.Log("daemon restarted after SIGTERM")
	if st := d.mustSh(t, "cat sandboxes/r/status"); !strings.HasPrefix(st, "r paused ") {
		t.Fatalf("r after a second restart: %q; want paused", st)
	}
	d.mustSh(t, "echo resume > sandboxes/r/ctl")
	d.checkGuest(t, "r")
	if info := d.mustSh(t, "cat snapshots/s1/info"); !strings.HasPrefix(info, "s1 sandbox=r ") || !strings.Contains(info, " kind=delta") {
		t.Errorf("snapshot s1 after the restarts: info %q; want r's, a delta", info)
	}
}

// logHas waits until the log at path holds want past its first off
// bytes, for at most a minute (the VMM writes it as the signal arrives).
func logHas(t *testing.T, path string, off int, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if len(b) > off && strings.Contains(string(b[off:]), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q after a minute; its new lines: %q", path, want, b[min(off, len(b)):])
		}
	}
}

// checkGuest checks that sandbox id's guest holds the marker file and
// the background process its mark script left.
func (d *daemon) checkGuest(t *testing.T, id string) {
	t.Helper()
	out := d.mustSh(t, `echo 'cat /root/marker; cat /proc/$(cat /root/sleep.pid)/comm' > sandboxes/`+id+`/exec; cat sandboxes/`+id+`/exec`)
	if want := "hello-" + id + "\nsleep\n"; out != want {
		t.Errorf("%s: guest marker and process = %q; want %q", id, out, want)
	}
}

// statusPid is the pid= field of a sandbox's status line.
func statusPid(t *testing.T, status string) int {
	t.Helper()
	pid := testenv.StatusPid(status)
	if pid == 0 {
		t.Fatalf("no pid in status %q", status)
	}
	return pid
}

// killWait kills pid with SIGKILL and waits until it has exited (its
// pidfd turns readable; a zombie counts).
func killWait(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 120_000)
		switch {
		case n == 0 && err == nil:
			t.Fatalf("pid %d still runs 2 min after SIGKILL", pid)
		case err != unix.EINTR:
			return
		}
	}
}
