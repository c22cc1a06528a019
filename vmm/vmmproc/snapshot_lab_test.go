package vmmproc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sandfs/ctl"
	"sandfs/snapshot"
	"sandfs/test/testenv"
	"sandfs/vmm"
	"sandfs/vmm/virtio"
	"sandfs/vmm/vmmproc"
)

// TestJailedSnapshotChain takes a full snapshot and then a delta of a
// jailed VMM, as ctl's runtime runs it, through the control verb, into a
// store inside its work directory; its status shows the tracking the lab's
// kernel calls for: soft-dirty on a kernel with PAGEMAP_SCAN (the lab's
// 6.12 stage; only the fds opened before the jail make it reachable), the
// dirty log on 6.1. A new VMM restores the chain and its guest agent
// answers.
func TestJailedSnapshotChain(t *testing.T) {
	testenv.NeedGuests(t)
	testenv.NeedRoot(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env := func(k, rel string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return filepath.Join(root, rel)
	}
	kernel, templates := env("SANDFS_KERNEL", "build/vmlinuz"), env("SANDFS_TEMPLATES", "build/templates")
	testenv.NeedFile(t, filepath.Join(templates, "base.ext4"), "make template")
	testenv.NeedFile(t, kernel, "make kernel")
	r := ctl.NewVMMRuntime(kernel, templates, nil)
	if !r.Jailed {
		t.Fatal("NewVMMRuntime as root does not jail its VMMs")
	}
	s := ctl.Spec{ID: "snapchain", Config: ctl.Config{Template: "base", MemBytes: 256 << 20, CPUs: 1},
		Dir: filepath.Join(t.TempDir(), "run", "snapchain"), UID: r.UIDs.First + 4300}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // two boots' worth, nested under a loaded lab
	defer cancel()
	t.Setenv(virtio.DebugEnv, "1") // agentUp's dump
	status := func(p *vmmproc.Process, state string) {
		t.Helper()
		st, err := p.Status(ctx)
		want := " tracking=" + vmm.TrackDirtyLog
		if testenv.KernelAtLeast(t, 6, 7) { // PAGEMAP_SCAN: vmm.mapRAM picks soft-dirty
			want = " tracking=" + vmm.TrackSoftDirty
		}
		if os.Getenv("SANDFS_LAB") == "" && strings.Contains(st, " tracking="+vmm.TrackDirtyLog) {
			want = " tracking=" + vmm.TrackDirtyLog // a host without CONFIG_MEM_SOFT_DIRTY
		}
		if err != nil || !strings.HasPrefix(st, state+" ") || !strings.HasSuffix(st, want) {
			t.Errorf("status = %q, %v; want %s ...%s", st, err, state, want)
		}
	}

	m, err := r.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	agentUp(ctx, t, m, s.Dir, "the booted guest's agent")
	p := vmmproc.Attach(t, filepath.Join(s.Dir, "vmm.sock"))
	status(p, "running")
	store := filepath.Join(s.Dir, "work", "snapshots")
	s1, s2 := filepath.Join(store, "s1"), filepath.Join(store, "s2")
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	status(p, "paused")
	if err := p.Snapshot(ctx, s1, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	agentUp(ctx, t, m, s.Dir, "the agent, after the snapshot,") // the guest does some work
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Snapshot(ctx, s2, s1); err != nil {
		t.Fatal(err)
	}
	// A delta over an ancestor of the last snapshot folds in the ones
	// between (the VMM's snapshot verb since pause folding).
	if err := p.Snapshot(ctx, filepath.Join(store, "s3"), s1); err != nil {
		t.Errorf("a delta over s1, an ancestor of the last snapshot: %v", err)
	} else if x, err1 := snapshot.Open(filepath.Join(store, "s3")); err1 != nil {
		t.Error(err1)
	} else if base, err2 := snapshot.Open(s1); err2 != nil || x.Full() || x.ParentSum != base.Sum {
		t.Errorf("s3 over s1: full %v, parent %x; want a delta over s1 (%v)", x.Full(), x.ParentSum, err2)
	}
	chain, err := snapshot.Chain(s2)
	if err != nil {
		t.Fatal(err)
	}
	pages := func(s *snapshot.Snapshot) (n uint64) {
		for _, r := range s.Runs {
			n += r.Count
		}
		return n
	}
	for _, c := range chain {
		t.Logf("%s: full %v, %d pages in %d runs", c.ID, c.Full(), pages(c), len(c.Runs))
	}
	if len(chain) != 2 || !chain[0].Full() || chain[1].Full() || pages(chain[1]) >= pages(chain[0]) {
		t.Fatalf("chain of s2: want s1 full, then a delta s2 of fewer pages")
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// A new VMM of the same sandbox restores the chain from its work directory.
	m2, err := r.StartFrom(ctx, s, s2)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop(context.Background())
	agentUp(ctx, t, m2, s.Dir, "the restored agent")
	status(vmmproc.Attach(t, filepath.Join(s.Dir, "vmm.sock")), "running")
	if err := m2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.Err(); err != nil {
		t.Errorf("the restored VMM ended with %v", err)
	}
}
