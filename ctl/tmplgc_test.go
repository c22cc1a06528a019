package ctl

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sandfs/snapshot"
)

// tmplEntry makes a cache entry named key with a snapshot mem file of
// n bytes, a layer and a console log.
func tmplEntry(t *testing.T, cache, key string, n int) {
	t.Helper()
	d := filepath.Join(cache, key, tmplSnapID(key))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string][]byte{
		filepath.Join(d, snapshot.MemFile):      make([]byte, n),
		filepath.Join(cache, key, entryLayer):   []byte("layer"),
		filepath.Join(cache, key, entryConsole): []byte("sandfs-init: serving 9P\n"),
	} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTemplatesAndGC: Templates lists each image with its cache entries
// (the current one marked); gc removes the entries of a rebuilt image
// and of an image that is gone, keeps the current one and what it does
// not understand, and runs at the first use of the cache.
func TestTemplatesAndGC(t *testing.T) {
	dir := t.TempDir()
	tdir, cache, kernel := filepath.Join(dir, "t"), filepath.Join(dir, "cache"), filepath.Join(dir, "vmlinuz")
	os.Mkdir(tdir, 0o755)
	for _, f := range []string{kernel, filepath.Join(tdir, "base.ext4")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &VMMRuntime{KernelPath: kernel, TemplatesDir: tdir, CacheDir: cache, Log: discardLog()}
	cur, err := r.currentKey("base", 256<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	stale, gone := "base-256m1c-0123456789abcdef", "old-512m2c-0123456789abcdef"
	tmplEntry(t, cache, cur, 8192)
	tmplEntry(t, cache, stale, 4096)
	tmplEntry(t, cache, gone, 4096)
	os.Mkdir(filepath.Join(cache, "not-a-key"), 0o755)

	ts, err := r.Templates()
	if err != nil || len(ts) != 1 || ts[0].Name != "base" || len(ts[0].Shapes) != 2 {
		t.Fatalf("Templates() = %+v, %v; want base with 2 shapes", ts, err)
	}
	var lines []string
	for _, s := range ts[0].Shapes {
		lines = append(lines, s.Line())
	}
	if n := strings.Count(strings.Join(lines, "\n"), "current=yes"); n != 1 || !strings.Contains(strings.Join(lines, "\n"), cur+" mem=256M cpus=1 data=") {
		t.Errorf("shapes = %q; want %s current, the other not", lines, cur)
	}

	r.templateCache() // the first use collects
	for key, want := range map[string]bool{cur: true, stale: false, gone: false, "not-a-key": true} {
		if _, err := os.Stat(filepath.Join(cache, key)); (err == nil) != want {
			t.Errorf("after gc, %s: %v; want kept %v", key, err, want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".rm-*")); len(left) != 0 {
		t.Errorf("after gc: %v left", left)
	}

	// The image rebuilt: the entry that was current is stale now.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(tdir, "base.ext4"), later, later); err != nil {
		t.Fatal(err)
	}
	if got := r.gcTemplates(); !slices.Equal(got, []string{cur}) {
		t.Errorf("gc after a rebuild removed %v; want [%s]", got, cur)
	}
	if _, err := os.Stat(filepath.Join(cache, cur)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("entry of the old image: %v; want removed", err)
	}
}
