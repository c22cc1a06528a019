package ctl

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the daemon TestKillDuringSnapshot
// kills.
func TestMain(m *testing.M) {
	if dir := os.Getenv("SANDFS_CTL_SNAPSHOTTER"); dir != "" {
		snapshotter(dir, os.Getenv("SANDFS_CTL_RUN"))
		return
	}
	os.Exit(m.Run())
}

// snapshotter opens a Plane on dir, makes a sandbox and takes snapshots
// of it forever (1 MiB each), removing every other one, printing a line
// after each snapshot.
func snapshotter(dir, run string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rt := newFakeRuntime()
	p, err := Open(dir, rt, nil)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if _, err := p.Ctl(ctx, []byte("new box-"+run)); err != nil {
		fail(err)
	}
	s, _ := p.Lookup("box-" + run)
	rt.machine("box-" + run).marker = strings.Repeat("m", 1<<20)
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", run, i)
		if err := s.Ctl(ctx, []byte("snapshot "+name)); err != nil {
			fail(err)
		}
		fmt.Println(name)
		if i%2 == 1 {
			if err := p.SnapshotCtl(ctx, name, []byte("rm")); err != nil {
				fail(err)
			}
		}
	}
}

// TestKillDuringSnapshot kills a daemon (SIGKILL) 20 times while it
// takes and removes snapshots, at points spread over the work; after
// each, the next Open lists only complete snapshots (record and files),
// every delta's parent is listed, and nothing else is left in the store.
func TestKillDuringSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for run := range 20 {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "SANDFS_CTL_SNAPSHOTTER="+dir, fmt.Sprintf("SANDFS_CTL_RUN=r%d", run))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// After 1 to 3 snapshots, then somewhere in the next ones.
		sc := bufio.NewScanner(out)
		for range run%3 + 1 {
			if !sc.Scan() {
				cmd.Wait()
				t.Fatalf("run %d: snapshotter ended: %s", run, stderr.String())
			}
		}
		time.Sleep(time.Duration(run%7) * 3 * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()

		p, _ := openPlane(t, dir, newFakeRuntime())
		listed := map[string]bool{}
		for _, si := range p.Snapshots() {
			listed[si.ID] = true
		}
		for _, si := range p.Snapshots() {
			b, err := os.ReadFile(filepath.Join(dir, snapsName, si.ID, "marker"))
			if err != nil || len(b) != 1<<20 {
				t.Errorf("run %d: listed snapshot %s is incomplete: %d bytes, %v", run, si.ID, len(b), err)
			}
			if si.Parent != "" && !listed[si.Parent] {
				t.Errorf("run %d: snapshot %s's parent %s is not listed", run, si.ID, si.Parent)
			}
		}
		for _, e := range storeEntries(t, dir) {
			if !listed[e] {
				t.Errorf("run %d: %s left in the store", run, e)
			}
		}
		if len(listed) == 0 {
			t.Errorf("run %d: no snapshot listed", run)
		}
		p.Close()
	}
}
