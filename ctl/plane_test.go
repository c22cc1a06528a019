package ctl

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/test/syncbuf"
)

// openPlane opens a Plane on dir with rt, closed at the end of the test.
func openPlane(t *testing.T, dir string, rt Runtime) (*Plane, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	p, err := Open(dir, rt, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatalf("Open(%q) = _, %v", dir, err)
	}
	t.Cleanup(func() { p.Close() })
	return p, logs
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// do writes msg to /ctl and fails the test on error.
func do(t *testing.T, p *Plane, msg string) string {
	t.Helper()
	reply, err := p.Ctl(ctx(t), []byte(msg))
	if err != nil {
		t.Fatalf("Ctl(%q) = _, %v", msg, err)
	}
	return reply
}

// sdo writes msg to the sandbox's ctl and fails the test on error.
func sdo(t *testing.T, s *Sandbox, msg string) {
	t.Helper()
	if err := s.Ctl(ctx(t), []byte(msg)); err != nil {
		t.Fatalf("%s: Ctl(%q) = %v", s.ID(), msg, err)
	}
}

func lookup(t *testing.T, p *Plane, id string) *Sandbox {
	t.Helper()
	s, err := p.Lookup(id)
	if err != nil {
		t.Fatalf("Lookup(%q) = _, %v", id, err)
	}
	return s
}

// wantErr checks err's errno and that its text contains each of frags.
func wantErr(t *testing.T, what string, err error, errno syscall.Errno, frags ...string) {
	t.Helper()
	if Errno(err) != errno {
		t.Fatalf("%s = %v (%v); want %v", what, err, Errno(err), errno)
	}
	for _, f := range frags {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("%s = %q; want text containing %q", what, err.Error(), f)
		}
	}
}

func ids(p *Plane) []string {
	var out []string
	for _, s := range p.Sandboxes() {
		out = append(out, s.ID()+" "+string(s.State()))
	}
	return out
}

func records(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestNilRuntime(t *testing.T) {
	dir := t.TempDir()
	p, logs := openPlane(t, dir, nil)
	_, err := p.Ctl(ctx(t), []byte("new t1\n"))
	wantErr(t, `Ctl("new t1")`, err, syscall.ENODEV, "new: no VMM runtime configured")
	if got := p.Err(); got != err.Error() {
		t.Errorf("Err() = %q; want %q", got, err.Error())
	}
	if !strings.Contains(logs.String(), "no VMM runtime") {
		t.Errorf("log lacks the failure: %s", logs)
	}
	_, err = p.Clone(ctx(t))
	wantErr(t, "Clone()", err, syscall.ENODEV, "clone: no VMM runtime configured")
	if got := ids(p); len(got) != 0 {
		t.Errorf("Sandboxes() = %v; want none", got)
	}
	if got := records(t, dir); len(got) != 0 {
		t.Errorf("records %v; want none", got)
	}
}

func TestNewLifecycle(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	if got := do(t, p, "new t1 mem=512M cpus=2 timeout=1h\n"); got != "t1\n" {
		t.Fatalf(`Ctl("new t1") reply %q; want "t1\n"`, got)
	}
	s := lookup(t, p, "t1")
	if s.State() != StateRunning {
		t.Fatalf("state after new = %v; want running", s.State())
	}
	spec := rt.lastSpec()
	if spec.ID != "t1" || spec.Template != "base" || spec.MemBytes != 512<<20 || spec.CPUs != 2 || spec.Dir != filepath.Join(dir, "run", "t1") {
		t.Errorf("Spec = %+v; want t1 base 512M 2 cpus in run/t1", spec)
	}
	if fi, err := os.Stat(spec.Dir); err != nil || !fi.IsDir() {
		t.Errorf("runtime dir %s: %v", spec.Dir, err)
	}
	st := s.Status()
	f := strings.Fields(st)
	want := []string{"t1", "running", "template=base", "mem=512M", "cpus=2", "world=-", "created=", "timeout=1h", "deadline=", "pid=4242", "limits=none", "boot=cold"}
	if len(f) != len(want) {
		t.Fatalf("Status() = %q; want fields %v", st, want)
	}
	for i := range want {
		if !strings.HasPrefix(f[i], want[i]) {
			t.Errorf("Status() field %d = %q; want %q (line %q)", i, f[i], want[i], st)
		}
	}
	if f[8] == "deadline=0" {
		t.Errorf("Status() = %q; want a deadline", st)
	}

	sdo(t, s, "pause")
	if s.State() != StatePaused || !rt.machine("t1").isPaused() {
		t.Fatalf("after pause: state %v, machine paused %v", s.State(), rt.machine("t1").isPaused())
	}
	err := s.Ctl(ctx(t), []byte("pause"))
	wantErr(t, `Ctl("pause") when paused`, err, syscall.EBUSY, `pause: sandbox "t1" is paused; need running`)
	if s.Err() != err.Error() {
		t.Errorf("Err() = %q; want %q", s.Err(), err.Error())
	}
	sdo(t, s, "resume")
	do(t, p, "kill t1")
	if s.State() != StateDead || !rt.machine("t1").ended() {
		t.Fatalf("after kill: state %v, machine ended %v", s.State(), rt.machine("t1").ended())
	}
	if got := ids(p); !slices.Equal(got, []string{"t1 dead"}) {
		t.Errorf("Sandboxes() = %v; want [t1 dead]", got)
	}
	do(t, p, "kill t1") // idempotent
	_, err = p.Ctl(ctx(t), []byte("new t1"))
	wantErr(t, `Ctl("new t1") again`, err, syscall.EEXIST, `new: sandbox exists "t1"`)
	do(t, p, "rm t1")
	if s.State() != StateRemoved || len(p.Sandboxes()) != 0 {
		t.Fatalf("after rm: state %v, listed %v", s.State(), ids(p))
	}
	if got := records(t, dir); len(got) != 0 {
		t.Errorf("records after rm = %v; want none", got)
	}
	if _, err := os.Stat(spec.Dir); !os.IsNotExist(err) {
		t.Errorf("runtime dir after rm: %v; want gone", err)
	}
	_, err = p.Lookup("t1")
	wantErr(t, `Lookup("t1") after rm`, err, syscall.ENOENT)
	err = s.Ctl(ctx(t), []byte("kill"))
	wantErr(t, `stale handle Ctl("kill")`, err, syscall.ENOENT)
	_, err = p.Ctl(ctx(t), []byte("kill t1"))
	wantErr(t, `Ctl("kill t1") after rm`, err, syscall.ENOENT, `kill: no sandbox "t1"`)
	if p.Err() != err.Error() {
		t.Errorf("plane Err() = %q; want %q", p.Err(), err.Error())
	}
	// A generated id.
	id := strings.TrimSpace(do(t, p, "new"))
	if !ValidName(id) || lookup(t, p, id).State() != StateRunning {
		t.Errorf("new without name gave id %q", id)
	}
}

// TestTransitions drives each sandbox verb from each reachable state.
func TestTransitions(t *testing.T) {
	tests := []struct {
		from  State
		msg   string
		errno syscall.Errno
		to    State
		text  string
	}{
		{StateNew, "cpus 2", 0, StateNew, ""},
		{StateNew, "timeout 5m", 0, StateNew, ""},
		{StateNew, "start", 0, StateRunning, ""},
		{StateNew, "pause", syscall.EBUSY, StateNew, `pause: sandbox "x" is new; need running`},
		{StateNew, "resume", syscall.EBUSY, StateNew, "need paused"},
		{StateNew, "kill", 0, StateRemoved, ""},
		{StateRunning, "start", syscall.EBUSY, StateRunning, `start: sandbox "x" is running; need new`},
		{StateRunning, "mem 1G", syscall.EBUSY, StateRunning, `mem: sandbox "x" is running; need new (configure before start)`},
		{StateRunning, "template t", syscall.EBUSY, StateRunning, "need new"},
		{StateRunning, "world w", syscall.EBUSY, StateRunning, "need new"},
		{StateRunning, "resume", syscall.EBUSY, StateRunning, "need paused"},
		{StateRunning, "pause", 0, StatePaused, ""},
		{StateRunning, "timeout 0", 0, StateRunning, ""},
		{StateRunning, "kill", 0, StateDead, ""},
		{StateRunning, "bogus", syscall.EINVAL, StateRunning, `ctl: unknown verb "bogus"`},
		{StateRunning, "cpus x", syscall.EINVAL, StateRunning, `cpus: invalid count "x"`},
		{StatePaused, "pause", syscall.EBUSY, StatePaused, "need running"},
		{StatePaused, "cpus 2", syscall.EBUSY, StatePaused, "need new"},
		{StatePaused, "resume", 0, StateRunning, ""},
		{StatePaused, "kill", 0, StateDead, ""},
		{StatePaused, "timeout 1h", 0, StatePaused, ""},
		{StateDead, "pause", syscall.EBUSY, StateDead, `pause: sandbox "x" is dead; need running`},
		{StateDead, "resume", syscall.EBUSY, StateDead, "need paused"},
		{StateDead, "start", syscall.EBUSY, StateDead, "need new"},
		{StateDead, "timeout 5m", syscall.EBUSY, StateDead, "need new, creating, running or paused"},
		{StateDead, "kill", 0, StateDead, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.from, tt.msg), func(t *testing.T) {
			p, _ := openPlane(t, t.TempDir(), newFakeRuntime())
			var s *Sandbox
			if tt.from == StateNew {
				var err error
				if s, err = p.Clone(ctx(t)); err != nil {
					t.Fatal(err)
				}
				// Rename for stable texts: clone ids are random.
				s = mustRename(t, p, s)
			} else {
				do(t, p, "new x")
				s = lookup(t, p, "x")
				switch tt.from {
				case StatePaused:
					sdo(t, s, "pause")
				case StateDead:
					sdo(t, s, "kill")
				}
			}
			v := s.Version()
			err := s.Ctl(ctx(t), []byte(tt.msg))
			if tt.errno == 0 && err != nil {
				t.Fatalf("Ctl(%q) in %s = %v; want success", tt.msg, tt.from, err)
			}
			if tt.errno != 0 {
				wantErr(t, fmt.Sprintf("Ctl(%q) in %s", tt.msg, tt.from), err, tt.errno, tt.text)
				if s.Version() != v {
					t.Errorf("refused Ctl(%q) changed the version %d → %d", tt.msg, v, s.Version())
				}
			}
			if s.State() != tt.to {
				t.Errorf("Ctl(%q) in %s: state %s; want %s", tt.msg, tt.from, s.State(), tt.to)
			}
			if tt.from != tt.to && !CanGo(tt.from, tt.to) && tt.from != StateNew {
				t.Errorf("test expects %s → %s, which the table forbids", tt.from, tt.to)
			}
		})
	}
}

// mustRename re-registers a cloned sandbox under the id "x", so that error
// texts are stable (clone ids are random).
func mustRename(t *testing.T, p *Plane, s *Sandbox) *Sandbox {
	t.Helper()
	p.mu.Lock()
	delete(p.boxes, s.id)
	s.id = "x"
	p.boxes["x"] = s
	p.mu.Unlock()
	return s
}

func TestCanGoTable(t *testing.T) {
	all := []State{StateNew, StateCreating, StateRunning, StatePaused, StateStopping, StateDead, StateRemoved}
	allowed := map[[2]State]bool{
		{StateNew, StateCreating}: true, {StateNew, StateRemoved}: true,
		{StateCreating, StateRunning}: true, {StateCreating, StateStopping}: true, {StateCreating, StateDead}: true,
		{StateRunning, StatePaused}: true, {StateRunning, StateStopping}: true, {StateRunning, StateDead}: true,
		{StatePaused, StateRunning}: true, {StatePaused, StateStopping}: true, {StatePaused, StateDead}: true,
		{StateStopping, StateDead}: true, {StateDead, StateRemoved}: true,
	}
	for _, a := range all {
		for _, b := range all {
			if got := CanGo(a, b); got != allowed[[2]State{a, b}] {
				t.Errorf("CanGo(%s, %s) = %v; want %v", a, b, got, !got)
			}
		}
	}
}

func TestClone(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	s, err := p.Clone(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !ValidName(s.ID()) || s.State() != StateNew {
		t.Fatalf("Clone() = %q in %s; want a valid id in state new", s.ID(), s.State())
	}
	if got := ids(p); !slices.Equal(got, []string{s.ID() + " new"}) {
		t.Errorf("Sandboxes() = %v; want the new one", got)
	}
	if got := records(t, dir); len(got) != 0 {
		t.Errorf("records of a new sandbox = %v; want none (never persisted)", got)
	}
	do(t, p, "world w1 lower="+t.TempDir())
	for _, m := range []string{"template py\n", "mem 1G", "cpus 4", "world w1", "timeout 90s"} {
		sdo(t, s, m)
	}
	if got, want := strings.Join(strings.Fields(s.Status())[1:6], " "), "new template=py mem=1G cpus=4 world=w1"; got != want {
		t.Errorf("Status() = %q; want %q...", s.Status(), want)
	}
	sdo(t, s, "start\n")
	spec := rt.lastSpec()
	if spec.Template != "py" || spec.MemBytes != 1<<30 || spec.CPUs != 4 || spec.World != "w1" || spec.Timeout != 90*time.Second {
		t.Errorf("Spec = %+v; want the configured values", spec)
	}
	s.Release() // closing the clone handle leaves a started sandbox alone
	if s.State() != StateRunning {
		t.Errorf("after Release: %s; want running", s.State())
	}
	if got := records(t, dir); !slices.Equal(got, []string{s.ID() + ".json"}) {
		t.Errorf("records = %v; want %s.json", got, s.ID())
	}

	s2, err := p.Clone(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	sdo(t, s2, "cpus 2")
	s2.Release()
	if s2.State() != StateRemoved {
		t.Errorf("released unstarted clone: %s; want removed", s2.State())
	}
	if _, err := p.Lookup(s2.ID()); Errno(err) != syscall.ENOENT {
		t.Errorf("Lookup(released clone) = %v; want ENOENT", err)
	}
	s3, _ := p.Clone(ctx(t))
	do(t, p, "rm "+s3.ID())
	if s3.State() != StateRemoved {
		t.Errorf("rm of a new sandbox: %s; want removed", s3.State())
	}
}

func TestStartFailure(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	rt.fail = Errorf(syscall.ENOENT, `template: no template "nope"`)
	_, err := p.Ctl(ctx(t), []byte("new t1 template=nope"))
	wantErr(t, `Ctl("new t1 template=nope")`, err, syscall.ENOENT, `new: sandbox "t1" failed to start: template: no template "nope"`)
	s := lookup(t, p, "t1")
	if s.State() != StateDead || s.Err() != `template: no template "nope"` {
		t.Errorf("after failed start: %s, err %q; want dead with the runtime's text", s.State(), s.Err())
	}
	if p.Err() != err.Error() {
		t.Errorf("plane Err() = %q; want %q", p.Err(), err.Error())
	}
	rt.fail = errors.New("vmm: exec: permission denied")
	c, _ := p.Clone(ctx(t))
	err = c.Ctl(ctx(t), []byte("start"))
	wantErr(t, "start with failing runtime", err, syscall.EIO, "start: sandbox", "failed to start: vmm: exec: permission denied")
	if c.State() != StateDead || c.Err() != err.Error() {
		t.Errorf("clone after failed start: %s, err %q", c.State(), c.Err())
	}
}

func TestMachineDies(t *testing.T) {
	rt := newFakeRuntime()
	p, logs := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1")
	s := lookup(t, p, "t1")
	v := s.Version()
	rt.machine("t1").console = "the guest's last line"
	rt.machine("t1").crash(errors.New("vmm: exit status 2"))
	line, err := s.WaitFrom(ctx(t), v)
	if err != nil || !strings.HasPrefix(line, "t1 dead ") {
		t.Fatalf("WaitFrom after crash = %q, %v; want the dead line", line, err)
	}
	if s.Err() != "vmm: exit status 2" {
		t.Errorf("Err() = %q; want the machine's reason", s.Err())
	}
	// The log says why and what the guest said last (its run directory
	// may go with the sandbox).
	if l := logs.String(); !strings.Contains(l, "ended unasked") || !strings.Contains(l, `console="the guest's last line"`) {
		t.Errorf("log = %q; want the unasked end with the machine's last words", l)
	}
}

// TestStallDump: a request to a guest that timed out (ETIMEDOUT) has its
// machine asked for its state dump, logged with its last words, once
// per machine however many time out; other failures ask nothing.
func TestStallDump(t *testing.T) {
	rt := newFakeRuntime()
	p, logs := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1")
	s := lookup(t, p, "t1")
	m := rt.machine("t1")
	m.console = "the guest's last line"
	s.Fail("procs/clone", Errorf(syscall.ENOENT, "no such process"))
	for range 3 {
		s.Fail("walk fs/tmp", Errorf(syscall.ETIMEDOUT, "no answer to walk fs/tmp in 15s"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "stopped answering") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "stopped answering") || !strings.Contains(l, `console="the guest's last line"`) {
		t.Errorf("log = %q; want the stall with the machine's last words", l)
	}
	m.mu.Lock()
	n := m.dumps
	m.mu.Unlock()
	if n != 1 {
		t.Errorf("%d dumps asked; want 1", n)
	}
}

func TestWait(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1")
	s := lookup(t, p, "t1")

	// A reader that opened wait sees the next change, even if it comes
	// before the read starts.
	v := s.Version()
	got := make(chan string, 1)
	go func() {
		line, err := s.WaitFrom(context.Background(), v)
		if err != nil {
			line = err.Error()
		}
		got <- line
	}()
	select {
	case line := <-got:
		t.Fatalf("WaitFrom returned %q before any change", line)
	case <-time.After(50 * time.Millisecond):
	}
	sdo(t, s, "pause")
	if line := <-got; !strings.HasPrefix(line, "t1 paused ") {
		t.Errorf("WaitFrom = %q; want the paused line", line)
	}
	v = s.Version()
	sdo(t, s, "resume")
	if line, _ := s.WaitFrom(ctx(t), v); !strings.HasPrefix(line, "t1 running ") {
		t.Errorf("WaitFrom after a missed change = %q; want the running line at once", line)
	}

	// Cancelled.
	c, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := s.Wait(c); !errors.Is(err, context.Canceled) || Errno(err) != syscall.EINTR {
		t.Errorf("Wait(cancelled) = %v; want context.Canceled (EINTR)", err)
	}

	// Removal wakes a waiter; waits on ended sandboxes return at once.
	sdo(t, s, "kill")
	if line, err := s.Wait(ctx(t)); err != nil || !strings.HasPrefix(line, "t1 dead ") {
		t.Errorf("Wait on dead = %q, %v; want the dead line at once", line, err)
	}
	do(t, p, "rm t1")
	if line, err := s.Wait(ctx(t)); err != nil || !strings.HasPrefix(line, "t1 removed ") {
		t.Errorf("Wait on removed = %q, %v; want the removed line at once", line, err)
	}

	// Release of a clone wakes its waiters.
	s2, _ := p.Clone(ctx(t))
	v = s2.Version()
	go func() { time.Sleep(20 * time.Millisecond); s2.Release() }()
	if line, err := s2.WaitFrom(ctx(t), v); err != nil || !strings.Contains(line, " removed ") {
		t.Errorf("WaitFrom across Release = %q, %v; want removed", line, err)
	}
}

func TestTimeout(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1 timeout=1s")
	do(t, p, "new t2 timeout=1s")
	s1, s2 := lookup(t, p, "t1"), lookup(t, p, "t2")
	sdo(t, s2, "timeout 0") // disarmed
	v := s1.Version()
	line, err := s1.WaitFrom(ctx(t), v)
	if err != nil || !strings.HasPrefix(line, "t1 stopping") && !strings.HasPrefix(line, "t1 dead") {
		t.Fatalf("WaitFrom = %q, %v; want stopping or dead", line, err)
	}
	for s1.State() != StateDead {
		s1.Wait(ctx(t))
	}
	if s1.Err() != "timeout: expired after 1s" {
		t.Errorf("Err() after timeout = %q", s1.Err())
	}
	if s2.State() != StateRunning {
		t.Errorf("t2 with timeout 0: %s; want running", s2.State())
	}
}

// TestKillWhileCreating kills a sandbox whose runtime has not finished
// starting it.
func TestKillWhileCreating(t *testing.T) {
	rt := newFakeRuntime()
	rt.gate = make(chan struct{}) // Start blocks until ctx is cancelled
	p, _ := openPlane(t, t.TempDir(), rt)
	errc := make(chan error, 1)
	go func() {
		_, err := p.Ctl(context.Background(), []byte("new t1"))
		errc <- err
	}()
	var s *Sandbox
	for s == nil || s.State() != StateCreating {
		time.Sleep(5 * time.Millisecond)
		s, _ = p.Lookup("t1")
	}
	if err := s.Ctl(ctx(t), []byte("pause")); Errno(err) != syscall.EBUSY {
		t.Errorf("pause while creating = %v; want EBUSY", err)
	}
	sdo(t, s, "timeout 5m") // allowed while creating
	sdo(t, s, "kill")
	if s.State() != StateDead {
		t.Errorf("after kill while creating: %s; want dead", s.State())
	}
	wantErr(t, "new of a sandbox killed while creating", <-errc, syscall.ECANCELED, `new: sandbox "t1" failed to start: killed while creating`)
	if s.Err() != "killed while creating" {
		t.Errorf("Err() = %q; want killed while creating", s.Err())
	}
}

func TestNewInterrupted(t *testing.T) {
	rt := newFakeRuntime()
	rt.gate = make(chan struct{})
	p, _ := openPlane(t, t.TempDir(), rt)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := p.Ctl(c, []byte("new t1"))
	wantErr(t, "new with a cancelled context", err, syscall.EINTR, `new: interrupted; sandbox "t1" goes on creating`)
	close(rt.gate)
	s := lookup(t, p, "t1")
	for s.State() == StateCreating {
		s.Wait(ctx(t))
	}
	if s.State() != StateRunning {
		t.Errorf("after interrupted new: %s; want running", s.State())
	}
}

func TestRuntimeOpFailure(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1")
	s := lookup(t, p, "t1")
	rt.machine("t1").failNext = errors.New("vcpu 0 did not stop")
	err := s.Ctl(ctx(t), []byte("pause"))
	wantErr(t, "pause with failing machine", err, syscall.EIO, "pause: vcpu 0 did not stop")
	if s.State() != StateRunning {
		t.Errorf("state after failed pause: %s; want running", s.State())
	}
	rt.machine("t1").failNext = errors.New("stuck")
	err = s.Ctl(ctx(t), []byte("kill"))
	wantErr(t, "kill with failing Stop", err, syscall.EIO, `kill: stopping "t1": stuck`)
	if s.State() != StateStopping {
		t.Errorf("state after failed stop: %s; want stopping", s.State())
	}
	sdo(t, s, "kill") // retried
	if s.State() != StateDead {
		t.Errorf("state after second kill: %s; want dead", s.State())
	}
}

func TestWatch(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	var mu sync.Mutex
	var seen []string
	stop := p.Watch(func(id string) {
		mu.Lock()
		seen = append(seen, id)
		mu.Unlock()
		p.Sandboxes() // may call back into the plane: no lock held
	})
	do(t, p, "new t1")
	do(t, p, "kill t1")
	do(t, p, "rm t1")
	stop()
	do(t, p, "new t2")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 4 || slices.Contains(seen, "t2") {
		t.Errorf("watch saw %v; want several t1 and no t2", seen)
	}
}

func TestClosedPlane(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1")
	s := lookup(t, p, "t1")
	p.Close()
	if _, err := p.Ctl(ctx(t), []byte("new t2")); Errno(err) != syscall.EIO {
		t.Errorf("Ctl after Close = %v; want EIO", err)
	}
	if err := s.Ctl(ctx(t), []byte("pause")); Errno(err) != syscall.EIO {
		t.Errorf("sandbox Ctl after Close = %v; want EIO", err)
	}
	if s.State() != StateRunning || rt.machine("t1").ended() {
		t.Errorf("Close stopped the machine (%s)", s.State())
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestCloseWakesWaiters: a new waiting for a slow runtime and a wait
// reader both return when the Plane is closed.
func TestCloseWakesWaiters(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new t1")
	s := lookup(t, p, "t1")
	rt.gate = make(chan struct{}) // Start blocks until Close cancels it
	errs := make(chan error, 2)
	go func() { _, err := p.Ctl(context.Background(), []byte("new t2")); errs <- err }()
	go func() { _, err := s.Wait(context.Background()); errs <- err }()
	for {
		if s2, err := p.Lookup("t2"); err == nil && s2.State() == StateCreating {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Close()
	for range 2 {
		select {
		case err := <-errs:
			if Errno(err) != syscall.EIO {
				t.Errorf("after Close: %v; want EIO (plane closed)", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake a waiter")
		}
	}
}

// TestNoFSImport keeps the dependency direction: fs presents ctl, never
// the other way round.
func TestNoFSImport(t *testing.T) {
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); p == "sandfs/fs" || strings.HasPrefix(p, "sandfs/fs/") {
				t.Errorf("%s imports %s", e.Name(), p)
			}
		}
	}
}

// limitedRuntime starts fake machines that report limits (Limiter).
type limitedRuntime struct {
	*fakeRuntime
	limits string
}

type limitedMachine struct {
	*fakeMachine
	limits string
}

func (m limitedMachine) Limits() string { return m.limits }

func (r limitedRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	m, err := r.fakeRuntime.Start(ctx, s)
	if err != nil {
		return nil, err
	}
	return limitedMachine{m.(*fakeMachine), r.limits}, nil
}

// TestStatusLimits: status ends with the machine's limits, "none" for a
// machine that does not say, "-" without a machine.
func TestStatusLimits(t *testing.T) {
	for _, tc := range []struct {
		rt   Runtime
		want string
	}{
		{limitedRuntime{newFakeRuntime(), "cgroup1"}, "limits=cgroup1"},
		{limitedRuntime{newFakeRuntime(), "cgroup2"}, "limits=cgroup2"},
		{newFakeRuntime(), "limits=none"},
	} {
		p, _ := openPlane(t, t.TempDir(), tc.rt)
		do(t, p, "new t1")
		s := lookup(t, p, "t1")
		if st := s.Status(); !strings.HasSuffix(st, " "+tc.want+" boot=cold") {
			t.Errorf("Status() = %q; want it to end with %s", st, tc.want)
		}
		do(t, p, "kill t1")
		if st := s.Status(); !strings.HasSuffix(st, " limits=- boot=-") {
			t.Errorf("Status() after kill = %q; want it to end with limits=-", st)
		}
	}
}
