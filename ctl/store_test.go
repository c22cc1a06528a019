package ctl

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRestartWithoutReattach(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a mem=1G")
	do(t, p, "world w1 lower="+t.TempDir())
	do(t, p, "new b cpus=3 world=w1")
	sdo(t, lookup(t, p, "b"), "pause")
	do(t, p, "new c")
	c := lookup(t, p, "c")
	v := c.Version() // WaitFrom(0) returned at once: c had changed already
	rt.machine("c").crash(errors.New("vmm: boom"))
	if line, err := c.WaitFrom(ctx(t), v); err != nil || !strings.HasPrefix(line, "c dead ") {
		t.Fatalf("c after its crash: %q, %v", line, err)
	}
	do(t, p, "new d")
	do(t, p, "kill d")
	before := ids(p)
	statusA := lookup(t, p, "a").Status()
	p.Close()

	p2, logs := openPlane(t, dir, rt) // fakeRuntime cannot re-attach
	if got, want := ids(p2), []string{"a dead", "b dead", "c dead", "d dead"}; !slices.Equal(got, want) {
		t.Fatalf("after restart Sandboxes() = %v; want %v (before: %v)", got, want, before)
	}
	for id, want := range map[string]string{"a": "daemon restarted", "b": "daemon restarted", "c": "vmm: boom", "d": ""} {
		if got := lookup(t, p2, id).Err(); got != want {
			t.Errorf("%s: Err() after restart = %q; want %q", id, got, want)
		}
	}
	// Same fields but the state (and pid, limits: no machine).
	a := lookup(t, p2, "a").Status()
	if want := strings.NewReplacer(" running ", " dead ", "pid=4242", "pid=0", "limits=none", "limits=-", "boot=cold", "boot=-").Replace(statusA); a != want {
		t.Errorf("status after restart = %q; want %q", a, want)
	}
	if got := lookup(t, p2, "b").Config(); got.CPUs != 3 || got.World != "w1" {
		t.Errorf("b's config after restart = %+v", got)
	}
	if !strings.Contains(logs.String(), "did not survive the restart") {
		t.Errorf("restart not logged: %s", logs)
	}
	// The dead state is persisted: a third Open agrees.
	p2.Close()
	p3, _ := openPlane(t, dir, nil)
	if got := ids(p3); !slices.Equal(got, []string{"a dead", "b dead", "c dead", "d dead"}) {
		t.Errorf("third Open: %v", got)
	}
	do(t, p3, "rm a") // works without a runtime
}

func TestRestartReattach(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a timeout=1h")
	do(t, p, "new b")
	sdo(t, lookup(t, p, "b"), "pause")
	do(t, p, "new gone")
	statusA := lookup(t, p, "a").Status()
	p.Close()
	rt.machine("gone").crash(nil) // died while the daemon was away

	p2, _ := openPlane(t, dir, rt)
	if got, want := ids(p2), []string{"a running", "b paused", "gone dead"}; !slices.Equal(got, want) {
		t.Fatalf("after restart Sandboxes() = %v; want %v", got, want)
	}
	if got := lookup(t, p2, "a").Status(); got != statusA {
		t.Errorf("status after re-attach = %q; want %q (same deadline)", got, statusA)
	}
	if got := lookup(t, p2, "gone").Err(); got != "daemon restarted: no such machine" {
		t.Errorf("gone: Err() = %q", got)
	}
	b := lookup(t, p2, "b")
	sdo(t, b, "resume")
	if rt.machine("b").isPaused() {
		t.Errorf("resume after re-attach did not reach the machine")
	}
	// The re-attached machine is watched.
	v := b.Version()
	rt.machine("b").crash(errors.New("vmm: killed by signal 9"))
	if line, _ := b.WaitFrom(ctx(t), v); !strings.HasPrefix(line, "b dead ") || b.Err() != "vmm: killed by signal 9" {
		t.Errorf("crash after re-attach: %q, err %q", line, b.Err())
	}
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, nil)
	_, err := Open(dir, nil, nil)
	wantErr(t, "second Open", err, syscall.EBUSY, "open: state directory in use by another daemon")
	p.Close()
	p2, err := Open(dir, nil, nil)
	if err != nil {
		t.Fatalf("Open after Close = %v", err)
	}
	p2.Close()
}

func TestCorruptRecords(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new good")
	do(t, p, "kill good")
	p.Close()
	recs := filepath.Join(dir, "sandboxes")
	files := map[string]string{
		"bad.json":    `{"format":1,"id":"bad","state":"runn`,
		"empty.json":  ``,
		"format.json": `{"format":99,"id":"format","state":"dead"}`,
		"other.json":  `{"format":1,"id":"good","state":"dead"}`,
		"state.json":  `{"format":1,"id":"state","state":"new"}`,
		"mem.json":    `{"format":1,"id":"mem","state":"dead","mem":1e30}`,
		"Upper.json":  `{}`,
		"notes.txt":   "hello",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(recs, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p2, logs := openPlane(t, dir, rt)
	if got := ids(p2); !slices.Equal(got, []string{"good dead"}) {
		t.Errorf("Sandboxes() = %v; want only the good record", got)
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(recs, name)); err != nil {
			t.Errorf("%s: %v; corrupt records must stay", name, err)
		}
		if !strings.Contains(logs.String(), name) {
			t.Errorf("%s not mentioned in the log:\n%s", name, logs)
		}
	}
	_, err := p2.Ctl(ctx(t), []byte("new bad"))
	wantErr(t, "new over a corrupt record", err, syscall.EEXIST)
}

func TestStaleTempFile(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new t1")
	sdo(t, lookup(t, p, "t1"), "pause")
	p.Close()
	// A write of the next state, killed before its rename.
	tmp := filepath.Join(dir, "sandboxes", ".t1.json.tmp123456")
	if err := os.WriteFile(tmp, []byte(`{"format":1,"id":"t1","sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	p2, _ := openPlane(t, dir, rt)
	if got := ids(p2); !slices.Equal(got, []string{"t1 paused"}) {
		t.Errorf("Sandboxes() = %v; want the old record [t1 paused]", got)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("stale temp file: %v; want removed", err)
	}
}

func TestRecordFormat(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, newFakeRuntime())
	do(t, p, "world w lower="+t.TempDir())
	do(t, p, "new t1 template=py mem=512M cpus=2 world=w timeout=10m")
	b, err := os.ReadFile(filepath.Join(dir, "sandboxes", "t1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("record %s: %v", b, err)
	}
	for k, want := range map[string]any{"format": 1.0, "id": "t1", "state": "running", "template": "py", "mem": float64(512 << 20), "cpus": 2.0, "world": "w", "timeout_ns": float64(10 * time.Minute)} {
		if m[k] != want {
			t.Errorf("record[%q] = %v; want %v (record %s)", k, m[k], want, b)
		}
	}
	if _, ok := m["deadline"]; !ok {
		t.Errorf("record lacks the deadline: %s", b)
	}
}

// TestCrashDuringWrites kills a process that keeps rewriting a record
// and checks that the record is always whole and the lock is free.
func TestCrashDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$")
	cmd.Env = append(os.Environ(), "CTL_TEST_WRITER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("writer did not start: %q, %v", buf, err)
	}
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	p, logs := openPlane(t, dir, nil)
	if got := ids(p); !slices.Equal(got, []string{"t1 dead"}) {
		t.Errorf("after the writer was killed: %v; want [t1 dead]\nlog: %s", got, logs)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "sandboxes"))
	for _, e := range ents {
		if e.Name() != "t1.json" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestHelperWriter is the process TestCrashDuringWrites kills.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv("CTL_TEST_WRITER_DIR")
	if dir == "" {
		t.Skip("helper process for TestCrashDuringWrites")
	}
	st, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := record{ID: "t1", Template: "base", MemBytes: DefaultMem, CPUs: 1, Created: time.Now()}
	os.Stdout.WriteString("ready\n")
	for i := 0; ; i++ {
		r.State = []State{StateRunning, StatePaused}[i%2]
		r.Err = strings.Repeat("x", i%3000) // records of varying size
		if err := st.write(r); err != nil {
			t.Fatal(err)
		}
	}
}
