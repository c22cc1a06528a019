package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWorldWritesAsOwner: a world's lower is checked only for reading by
// its creator. A user who may only read a directory (here: root's, 0755)
// must not get it written through a world: a mode=unsafe-rw world is
// opened to write as its owner, and apply (and apply force) write as
// the world's owner, whoever asks (world TestApplyAsOwner and
// TestUnsafeRWAsOwner show the kernel refusing them).
func TestWorldWritesAsOwner(t *testing.T) {
	dir, lower := t.TempDir(), filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(lower), filepath.Dir(filepath.Dir(lower))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := openPlane(t, dir, nil)
	opened := map[string]*fakeWorld{}
	p.SetWorldOpener(worldsOpener(opened))
	if _, err := p.Ctl(as(t, alice), []byte("world arw lower="+lower+" mode=unsafe-rw")); err != nil {
		t.Fatal(err)
	}
	if o := opened["arw"].owner; o.UID != 4001 {
		t.Errorf("alice's unsafe-rw world opened for owner %+v; want alice's", o)
	}
	if _, err := p.Ctl(as(t, alice), []byte("world w lower="+lower)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WorldCtl(as(t, alice), "w", []byte("apply force")); err != nil {
		t.Errorf("alice's apply force: %v", err)
	}
	if _, err := p.WorldCtl(ctx(t), "w", []byte("apply force")); err != nil {
		t.Errorf("root's apply force: %v", err)
	}
	if c := strings.Join(opened["w"].calls, ","); c != "apply force as 4001,apply force as 4001" {
		t.Errorf("applies reached the world as %q; want alice's twice", c)
	}
	if _, err := p.Ctl(ctx(t), []byte("world rw lower="+lower+" mode=unsafe-rw")); err != nil {
		t.Errorf("root's unsafe-rw world: %v", err)
	}
}

// TestWorldOverProc: /proc is readable by everyone, but its files are
// guarded at open by the opener's credentials (/proc/1/maps, kallsyms),
// and the daemon opens a lower's files as root: a world over it is root's.
func TestWorldOverProc(t *testing.T) {
	p, _ := openPlane(t, t.TempDir(), nil)
	p.SetWorldOpener(worldsOpener(map[string]*fakeWorld{}))
	_, err := p.Ctl(as(t, alice), []byte("world w lower=/proc"))
	wantErr(t, "alice's world over /proc", err, syscall.EACCES, "proc")
	if _, err := p.Ctl(ctx(t), []byte("world w lower=/proc")); err != nil {
		t.Errorf("root's world over /proc: %v", err)
	}
}

// TestWorldLowerProbe: the daemon resolves a lower as root; a user must
// not learn from its answer whether a name exists inside a directory they
// may not search: both are EACCES. Links are still resolved (from a
// directory the user may search).
func TestWorldLowerProbe(t *testing.T) {
	top := t.TempDir()
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(top), 0o755); err != nil {
		t.Fatal(err)
	}
	closed, open := filepath.Join(top, "closed"), filepath.Join(top, "open")
	for _, d := range []string{filepath.Join(closed, "exists"), open} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("open", filepath.Join(top, "link")); err != nil {
		t.Fatal(err)
	}
	p, _ := openPlane(t, t.TempDir(), nil)
	opened := map[string]*fakeWorld{}
	p.SetWorldOpener(worldsOpener(opened))
	for _, sub := range []string{"exists", "missing"} {
		_, err := p.Ctl(as(t, alice), []byte("world w lower="+filepath.Join(closed, sub)))
		wantErr(t, "alice's world over closed/"+sub, err, syscall.EACCES)
	}
	if _, err := p.Ctl(as(t, alice), []byte("world w lower="+filepath.Join(top, "link"))); err != nil {
		t.Fatalf("alice's world through a link to open/: %v", err)
	}
	if f := opened["w"]; f == nil || f.lower != open {
		t.Errorf("opened %+v; want lower %s", f, open)
	}
}
