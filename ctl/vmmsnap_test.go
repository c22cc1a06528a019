package ctl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sandfs/snapshot"
)

// TestImportFile: only a regular file with one link, beneath the work
// directory and reached without a symlink, is linked out, read-only.
func TestImportFile(t *testing.T) {
	work, out := t.TempDir(), t.TempDir()
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(work, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ok")
	write("twice")
	secret := filepath.Join(out, "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.Link(filepath.Join(work, "twice"), filepath.Join(work, "twice2")),
		os.Symlink(secret, filepath.Join(work, "link")),
		os.Symlink(out, filepath.Join(work, "dirlink")),
		os.Mkdir(filepath.Join(work, "dir"), 0o700),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(out, "imported")
	if err := importFile(work, "ok", dst, 0, false); err != nil {
		t.Fatalf("importFile(ok) = %v", err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("imported file: %v, %v; want mode 0644", fi, err)
	}
	write("moved")
	if err := importFile(work, "dir/../moved", filepath.Join(out, "moved"), 0, true); err != nil {
		t.Fatalf("importFile(moved) = %v", err)
	}
	if _, err := os.Lstat(filepath.Join(work, "moved")); err == nil {
		t.Errorf("a moved file is still in the work directory")
	}
	if b, err := os.ReadFile(filepath.Join(out, "moved")); err != nil || string(b) != "moved" {
		t.Errorf("moved file: %q, %v", b, err)
	}
	for _, rel := range []string{"twice", "link", "dirlink/secret", "../" + filepath.Base(out) + "/secret", "dir", "missing"} {
		if err := importFile(work, rel, filepath.Join(out, "bad"), 0, true); err == nil {
			t.Errorf("importFile(%q) = nil; want refused", rel)
		}
	}
	if err := importFile(work, "dir/../ok", filepath.Join(out, "bad"), os.Getuid()+1, false); err == nil {
		t.Errorf("importFile of a file of another uid = nil; want refused")
	}
	if _, err := os.Lstat(filepath.Join(out, "bad")); err == nil {
		t.Errorf("a refused import left a file")
	}
	for _, f := range []string{secret, filepath.Join(work, "twice"), filepath.Join(work, "link")} {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("a refused move removed %s: %v", f, err)
		}
	}
}

// TestLinkChain links a full snapshot and a delta over it into a new
// store, where the delta's chain opens.
func TestLinkChain(t *testing.T) {
	src := t.TempDir()
	mem := make([]byte, 16*snapshot.PageSize)
	mem[0], mem[5*snapshot.PageSize] = 1, 2
	pages := snapshot.NewPages(16)
	pages.Set(0)
	full, err := snapshot.Write(filepath.Join(src, "s1"), mem, pages, nil, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	pages.Clear()
	pages.Set(5)
	if _, err := snapshot.Write(filepath.Join(src, "s2"), mem, pages, full, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "snapshots")
	if err := linkChain(store, filepath.Join(src, "s2"), 0); err != nil {
		t.Fatalf("linkChain = %v", err)
	}
	chain, err := snapshot.Chain(filepath.Join(store, "s2"))
	if err != nil || len(chain) != 2 || chain[0].ID != "s1" {
		t.Fatalf("Chain in the new store = %v, %v; want s1, s2", chain, err)
	}
	if err := linkChain(store, filepath.Join(src, "s2"), 0); err == nil {
		t.Errorf("linkChain into an existing store = nil; want an error")
	}
	if v := cmdlineValue("root=/dev/vda sandfs.hostname=template quiet", "sandfs.hostname"); v != "template" {
		t.Errorf("cmdlineValue = %q", v)
	}
}

// TestRestoreStaleImage: a snapshot whose disk layer is over another
// build of the template image is refused before anything is started.
func TestRestoreStaleImage(t *testing.T) {
	tdir := t.TempDir()
	kernel := filepath.Join(tdir, "vmlinuz")
	image := filepath.Join(tdir, "base.ext4")
	for _, f := range []string{kernel, image} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id, err := imageID(image)
	if err != nil {
		t.Fatal(err)
	}
	r := &VMMRuntime{KernelPath: kernel, TemplatesDir: tdir}
	spec := Spec{ID: "x", Config: Config{Template: "base"}, Dir: t.TempDir()}
	for _, tc := range []struct {
		boot  string
		errno syscall.Errno
	}{
		{"", syscall.EINVAL},
		{"x image=" + strings.Repeat("0", len(id)), syscall.ESTALE},
	} {
		from := SnapshotRef{SnapshotInfo: SnapshotInfo{ID: "s1", Boot: tc.boot}, Dir: t.TempDir()}
		if _, err := r.Restore(context.Background(), spec, from); Errno(err) != tc.errno {
			t.Errorf("Restore(boot %q) = %v; want %v", tc.boot, err, tc.errno)
		}
	}
	if ents, _ := os.ReadDir(spec.Dir); len(ents) != 0 {
		t.Errorf("a refused restore left %v in the run directory", ents)
	}
	// A rebuilt image has another id.
	os.Remove(image)
	if err := os.WriteFile(image, []byte("xy"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id2, _ := imageID(image); id2 == id {
		t.Errorf("imageID of a rebuilt image = %s, the old one's", id2)
	}
}

// TestRemoveBeneath removes a directory of files, a symlink (not what it
// points to) and nothing outside the work directory.
func TestRemoveBeneath(t *testing.T) {
	work, out := t.TempDir(), t.TempDir()
	keep := filepath.Join(out, "keep")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(work, "s", "old"), 0o700),
		os.WriteFile(filepath.Join(work, "s", "old", "meta"), nil, 0o600),
		os.WriteFile(filepath.Join(work, "s", "old", "mem"), nil, 0o600),
		os.MkdirAll(keep, 0o700),
		os.WriteFile(filepath.Join(keep, "f"), nil, 0o600),
		os.Symlink(keep, filepath.Join(work, "s", "link")),
		os.Symlink(out, filepath.Join(work, "t")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"s/old", "s/link", "s/absent", "absent/x"} {
		if err := removeBeneath(work, rel); err != nil {
			t.Errorf("removeBeneath(%q) = %v", rel, err)
		}
		if _, err := os.Lstat(filepath.Join(work, rel)); err == nil {
			t.Errorf("%s still there", rel)
		}
	}
	if err := removeBeneath(work, "t/keep"); err == nil {
		t.Errorf("removeBeneath through a symlink = nil; want refused")
	}
	if _, err := os.Stat(filepath.Join(keep, "f")); err != nil {
		t.Errorf("outside the work directory: %v", err)
	}
}
