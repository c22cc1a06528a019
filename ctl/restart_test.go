package ctl

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestRestartReaps: at Open, a machine that no sandbox gets back is
// ended through the Reaper: one still running for a sandbox recorded
// dead (a kill cut short) or creating, and one in a run directory no
// record names, which is removed; run directories of dead sandboxes stay
// (console, disk layer).
func TestRestartReaps(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a")
	do(t, p, "new b")
	do(t, p, "kill b")
	p.Close()
	// While the daemon was away, or as it died:
	b := rt.run("b") // b's VMM outlived a kill cut short
	rec := `{"format":1,"id":"c","state":"creating","template":"base","mem":268435456,"cpus":1,"timeout_ns":0,"created":"2026-12-01T10:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "sandboxes", "c.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	c := rt.run("c") // started, not yet recorded running
	ghost := rt.run("ghost")
	for _, id := range []string{"c", "ghost"} {
		if err := os.MkdirAll(filepath.Join(dir, "run", id, "work"), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	p2, _ := openPlane(t, dir, rt)
	if got, want := ids(p2), []string{"c dead", "a running", "b dead"}; !slices.Equal(got, want) { // c's record is older
		t.Errorf("after restart: %v; want %v", got, want)
	}
	for id, m := range map[string]*fakeMachine{"b": b, "c": c, "ghost": ghost} {
		if !m.ended() {
			t.Errorf("%s: machine still running after restart", id)
		}
	}
	if rt.machine("a").ended() {
		t.Error("a: re-attached machine was reaped")
	}
	if got := lookup(t, p2, "c").Err(); got != "daemon restarted" {
		t.Errorf("c: Err() = %q; want \"daemon restarted\"", got)
	}
	reaped := rt.reapedIDs()
	slices.Sort(reaped)
	if want := []string{"b", "c", "ghost"}; !slices.Equal(reaped, want) {
		t.Errorf("reaped %v; want %v", reaped, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "ghost")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run/ghost (no record) after restart: %v; want removed", err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := os.Stat(filepath.Join(dir, "run", id)); err != nil {
			t.Errorf("run/%s after restart: %v; want kept", id, err)
		}
	}
}

// TestRestartCorruptRecordReaped: the machine in the run directory of a
// corrupt record is ended, and the directory stays with the record.
func TestRestartCorruptRecordReaped(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new x")
	p.Close()
	if err := os.WriteFile(filepath.Join(dir, "sandboxes", "x.json"), []byte(`{"format":1,"id":"x","sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	openPlane(t, dir, rt)
	if !rt.machine("x").ended() {
		t.Error("machine of a corrupt record still running")
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "x")); err != nil {
		t.Errorf("run/x of a corrupt record: %v; want kept", err)
	}
}

// TestRestartSettles: a re-attached machine is brought to the recorded
// state, which is what was reported (the daemon may have died after the
// machine paused or resumed and before the record said so).
func TestRestartSettles(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new r")
	do(t, p, "new q")
	sdo(t, lookup(t, p, "q"), "pause")
	p.Close()
	rt.machine("r").Pause(ctx(t)) // paused, recorded running
	rt.machine("q").Resume(ctx(t))

	p2, _ := openPlane(t, dir, rt)
	// As a set: r and q may have the same creation time (the lab's clock
	// has ticked coarsely), and then they list by id.
	got := ids(p2)
	slices.Sort(got)
	if want := []string{"q paused", "r running"}; !slices.Equal(got, want) {
		t.Errorf("after restart: %v; want %v", got, want)
	}
	if rt.machine("r").isPaused() || !rt.machine("q").isPaused() {
		t.Errorf("machines not in their recorded states: r paused %v, q paused %v", rt.machine("r").isPaused(), rt.machine("q").isPaused())
	}
}

// TestRestartSettleFails: a re-attached machine that cannot be brought
// to its recorded state is stopped; the sandbox is dead and err says why.
func TestRestartSettleFails(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new r")
	p.Close()
	m := rt.machine("r")
	m.failNext = Errorf(syscall.EIO, "vmm: not answering")

	p2, _ := openPlane(t, dir, rt)
	s := lookup(t, p2, "r")
	for {
		v := s.Version()
		if s.State().Ended() {
			break
		}
		if _, err := s.WaitFrom(ctx(t), v); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Err(); s.State() != StateDead || !strings.HasPrefix(got, "daemon restarted: resume: vmm: not answering") {
		t.Errorf("r after a failed settle: %s, err %q", s.State(), got)
	}
	if !m.ended() {
		t.Error("machine still running")
	}
}
