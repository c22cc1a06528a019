package ctl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTmplKey(t *testing.T) {
	dir := t.TempDir()
	img, kern := filepath.Join(dir, "base.ext4"), filepath.Join(dir, "vmlinux")
	for _, p := range []string{img, kern} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := func(mem uint64, cpus int, cmdline string) string {
		t.Helper()
		s, err := tmplKey("base", img, kern, mem, cpus, cmdline)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	k1 := k(256<<20, 1, "")
	if !strings.HasPrefix(k1, "base-256m1c-") || k1 != k(256<<20, 1, "") {
		t.Errorf("key %q: want base-256m1c-<hash>, stable", k1)
	}
	seen := map[string]string{k1: "first"}
	for name, key := range map[string]string{"mem": k(512<<20, 1, ""), "cpus": k(256<<20, 2, ""), "cmdline": k(256<<20, 1, "x=1")} {
		if other, dup := seen[key]; dup {
			t.Errorf("%s: key %q same as %s", name, key, other)
		}
		seen[key] = name
	}
	// A rebuilt image (new inode, mtime) is another entry.
	os.Remove(img)
	os.WriteFile(img, []byte("y"), 0o644)
	os.Chtimes(img, time.Now(), time.Now().Add(time.Hour))
	if k(256<<20, 1, "") == k1 {
		t.Error("key unchanged after the image was rebuilt")
	}
	if _, err := tmplKey("base", filepath.Join(dir, "nosuch"), kern, 1, 1, ""); err == nil {
		t.Error("key of a missing image: no error")
	}
}

// TestTmplCacheAtomic: a failed build leaves nothing (no entry, no
// temporary directory) and is retried by the next get; concurrent gets
// build once; a finished entry is found without building.
func TestTmplCacheAtomic(t *testing.T) {
	c := &tmplCache{dir: filepath.Join(t.TempDir(), "cache")}
	ctx := context.Background()
	boom := errors.New("boom")
	_, _, err := c.get(ctx, "k", func(_ context.Context, dir string) error {
		os.WriteFile(filepath.Join(dir, "half"), []byte("x"), 0o644)
		return boom
	})
	if !strings.Contains(errText(err), "boom") {
		t.Fatalf("failed build: err %v", err)
	}
	if ents, _ := os.ReadDir(c.dir); len(ents) != 0 {
		t.Fatalf("failed build left %v", ents)
	}
	var builds atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, _, err := c.get(ctx, "k", func(_ context.Context, dir string) error {
				builds.Add(1)
				<-release
				return os.WriteFile(filepath.Join(dir, "done"), []byte("ok"), 0o644)
			})
			if err != nil {
				t.Error(err)
			}
			dirs[i] = d
		}()
	}
	for builds.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "k")); err == nil {
		t.Error("entry visible before its build finished")
	}
	close(release)
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Errorf("%d builds for 8 concurrent gets; want 1", n)
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "done")); err != nil || string(b) != "ok" {
			t.Errorf("entry %s: %q %v", d, b, err)
		}
	}
	if _, built, err := c.get(ctx, "k", func(context.Context, string) error { t.Error("rebuilt"); return nil }); built || err != nil {
		t.Errorf("get of a built entry: built %v, err %v", built, err)
	}
	if ents, _ := filepath.Glob(filepath.Join(c.dir, ".b-*")); len(ents) != 0 {
		t.Errorf("temporary directories left: %v", ents)
	}
}

// TestTmplCacheAbandoned: a build that fails because the get that
// started it was cancelled (its sandbox killed while creating) fails that
// get only; a get waiting for it builds again and gets the entry.
func TestTmplCacheAbandoned(t *testing.T) {
	c := &tmplCache{dir: filepath.Join(t.TempDir(), "cache")}
	first, cancel := context.WithCancel(context.Background())
	started, firstErr := make(chan struct{}), make(chan error, 1)
	go func() {
		_, _, err := c.get(first, "k", func(ctx context.Context, dir string) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		firstErr <- err
	}()
	<-started
	waiterErr := make(chan error, 1)
	var builds atomic.Int32
	go func() {
		_, built, err := c.get(context.Background(), "k", func(_ context.Context, dir string) error {
			builds.Add(1)
			return os.WriteFile(filepath.Join(dir, "done"), []byte("ok"), 0o644)
		})
		if err == nil && !built {
			err = errors.New("waiter did not build")
		}
		waiterErr <- err
	}()
	for waiting := 0; waiting == 0; {
		time.Sleep(time.Millisecond)
		c.mu.Lock()
		if f := c.building["k"]; f != nil {
			waiting = f.waiters
		}
		c.mu.Unlock()
	}
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) && !strings.Contains(errText(err), "canceled") {
		t.Errorf("cancelled builder: err %v", err)
	}
	if err := <-waiterErr; err != nil {
		t.Errorf("waiter of an abandoned build: %v", err)
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("waiter built %d times; want 1", n)
	}
	if b, err := os.ReadFile(filepath.Join(c.dir, "k", "done")); err != nil || string(b) != "ok" {
		t.Errorf("entry: %q %v", b, err)
	}
}

// TestCopyLayerFile: the copy is private (writes to it do not reach the
// source), keeps the size and data of a sparse source, and refuses an
// existing destination.
func TestCopyLayerFile(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	f, _ := os.Create(src)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), 64<<20)
	f.Close()
	if err := CopyLayerFile(dst, src, 0); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if string(a) != string(b) || len(b) != 64<<20+4 {
		t.Fatalf("copy differs: %d bytes vs %d", len(b), len(a))
	}
	g, _ := os.OpenFile(dst, os.O_WRONLY, 0)
	g.WriteAt([]byte("HEAD"), 0)
	g.Close()
	if a, _ := os.ReadFile(src); string(a[:4]) != "head" {
		t.Error("a write to the copy reached the source")
	}
	if err := CopyLayerFile(dst, src, 0); err == nil {
		t.Error("copy over an existing file: no error")
	}
}
