package ctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sandfs/ctl/cred"
)

// fakeWorld is a WorldBackend that records the calls made to it.
type fakeWorld struct {
	lower, dir, mode string
	calls            []string
	closed           bool
	state            string // what Save keeps and Restore brings back
	owner            cred.Owner
}

func (f *fakeWorld) Save(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	return "copied", os.WriteFile(filepath.Join(dir, "state"), []byte(f.state), 0o600)
}

func (f *fakeWorld) Restore(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "state"))
	f.state = string(b)
	return err
}

func (f *fakeWorld) Diff() (string, error) { return "added x\n", nil }
func (f *fakeWorld) Apply(force bool, as cred.Cred) error {
	if force {
		f.calls = append(f.calls, fmt.Sprintf("apply force as %d", as.UID))
		return nil
	}
	f.calls = append(f.calls, "apply")
	return Errorf(syscall.EBUSY, "apply: changed in the lower since the world changed them: a.txt")
}
func (f *fakeWorld) Discard() error       { f.calls = append(f.calls, "discard"); return nil }
func (f *fakeWorld) Rebase() (int, error) { f.calls = append(f.calls, "rebase"); return 2, nil }
func (f *fakeWorld) Status() string       { return "changes=1" }
func (f *fakeWorld) Close() error         { f.closed = true; return nil }
func (f *fakeWorld) ServeConn(_ context.Context, c net.Conn, _ cred.Cred, _ *slog.Logger) {
	c.Close()
}

// worldsOpener opens fakeWorlds, kept by directory.
func worldsOpener(opened map[string]*fakeWorld) WorldOpener {
	return func(lower, dir, mode string, owner cred.Owner) (WorldBackend, error) {
		f := &fakeWorld{lower: lower, dir: dir, mode: mode, owner: owner}
		opened[filepath.Base(dir)] = f
		return f, nil
	}
}

// readableLower is a new directory that the plane's world checks let
// any user name as a lower (it and its parent searchable by all).
func readableLower(t *testing.T) string {
	t.Helper()
	lower := t.TempDir()
	for _, d := range []string{filepath.Dir(lower), lower} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return lower
}

// TestWorldVerbs: world on /ctl creates a world that survives a restart;
// its ctl verbs reach its data; errors name their cause.
func TestWorldVerbs(t *testing.T) {
	dir, lower := t.TempDir(), t.TempDir()
	p, _ := openPlane(t, dir, nil)
	opened := map[string]*fakeWorld{}
	p.SetWorldOpener(worldsOpener(opened))
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(lower, link); err != nil {
		t.Fatal(err)
	}
	if reply, err := p.Ctl(ctx(t), []byte("world w1 lower="+link)); err != nil || reply != "w1\n" {
		t.Fatalf("world: %q, %v", reply, err)
	}
	f := opened["w1"]
	if f == nil || f.lower != lower || f.mode != "overlay" || f.dir != filepath.Join(dir, "worlds", "w1") {
		t.Fatalf("opened %+v", f)
	}
	for m, want := range map[string]syscall.Errno{
		"world w1 lower=" + lower:             syscall.EEXIST,
		"world w2":                            syscall.EINVAL,
		"world w2 lower=rel":                  syscall.EINVAL,
		"world w2 lower=/nonexistent-sandfs":  syscall.ENOENT,
		"world w2 lower=" + lower + " mode=x": syscall.EINVAL,
		"world ../x lower=" + lower:           syscall.EINVAL,
	} {
		if _, err := p.Ctl(ctx(t), []byte(m)); Errno(err) != want {
			t.Errorf("%s: %v, want %v", m, err, want)
		}
	}
	if _, err := p.WorldCtl(ctx(t), "w1", []byte("apply")); Errno(err) != syscall.EBUSY || !strings.Contains(p.Err(), "a.txt") {
		t.Errorf("apply: %v, err %q", err, p.Err())
	}
	if _, err := p.WorldCtl(ctx(t), "w1", []byte("apply now")); Errno(err) != syscall.EINVAL {
		t.Errorf("apply now: %v", err)
	}
	for _, m := range []string{"apply force", "discard", "rebase"} {
		if _, err := p.WorldCtl(ctx(t), "w1", []byte(m)); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	if got := strings.Join(f.calls, ","); got != "apply,apply force as 0,discard,rebase" {
		t.Errorf("calls %s", got)
	}
	if _, err := p.WorldCtl(as(t, alice), "w1", []byte("discard")); Errno(err) != syscall.EPERM {
		t.Errorf("another uid's discard: %v", err)
	}

	// A restart keeps the world; its data is opened again at first use.
	p.Close()
	if !f.closed {
		t.Error("Close left the world's data open")
	}
	p, _ = openPlane(t, dir, nil)
	p.SetWorldOpener(worldsOpener(opened))
	if ws := p.Worlds(); len(ws) != 1 || ws[0].Name != "w1" || ws[0].Lower != lower {
		t.Fatalf("after restart: %+v", ws)
	}
	if _, err := p.World("w1"); err != nil || opened["w1"] == f {
		t.Errorf("reopen: %v", err)
	}
	if _, err := p.WorldCtl(ctx(t), "w1", []byte("rm")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "worlds", "w1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("world dir after rm: %v", err)
	}
	if _, err := p.LookupWorld("w1"); Errno(err) != syscall.ENOENT {
		t.Errorf("lookup after rm: %v", err)
	}
}

// TestWorldAccess: a world cannot expose a directory its creator could
// not read.
func TestWorldAccess(t *testing.T) {
	p, _ := openPlane(t, t.TempDir(), nil)
	p.SetWorldOpener(worldsOpener(map[string]*fakeWorld{}))
	top := t.TempDir()
	open, closed := filepath.Join(top, "open"), filepath.Join(top, "closed")
	for d, m := range map[string]os.FileMode{open: 0o755, closed: 0o700} {
		if err := os.Mkdir(d, m); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{top, filepath.Dir(top)} { // the test's own directories
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Ctl(as(t, alice), []byte("world a lower="+closed)); Errno(err) != syscall.EACCES || !strings.Contains(p.Err(), "may not read") {
		t.Errorf("alice over a 0700 root dir: %v (%q)", err, p.Err())
	}
	if len(p.Worlds()) != 0 {
		t.Errorf("a refused world is listed: %v", p.Worlds())
	}
	if _, err := p.Ctl(as(t, alice), []byte("world a lower="+open)); err != nil {
		t.Fatal(err)
	}
	if wi, _ := p.LookupWorld("a"); wi.Owner != alice.Owner() {
		t.Errorf("owner %v, want alice", wi.Owner)
	}
	if _, err := p.WorldCtl(as(t, bob), "a", []byte("rm")); Errno(err) != syscall.EPERM {
		t.Errorf("bob's rm of alice's world: %v", err)
	}
}

// TestWorldAttach: a sandbox may attach only an existing world of its
// owner's.
func TestWorldAttach(t *testing.T) {
	p, _ := openPlane(t, t.TempDir(), newFakeRuntime())
	lower := readableLower(t)
	if _, err := p.Ctl(ctx(t), []byte("new a world=nosuch")); Errno(err) != syscall.ENOENT {
		t.Errorf("unknown world: %v", err)
	}
	if _, err := p.Ctl(as(t, alice), []byte("world wa lower="+lower)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ctl(as(t, bob), []byte("new b world=wa")); Errno(err) != syscall.EPERM {
		t.Errorf("bob attaching alice's world: %v", err)
	}
	if len(p.Sandboxes()) != 0 {
		t.Errorf("refused sandboxes listed: %v", ids(p))
	}
	do(t, p, "new r world=wa") // root may
	if _, err := p.Ctl(as(t, alice), []byte("new c world=wa")); err != nil {
		t.Errorf("alice: %v", err)
	}
	if _, err := p.WorldCtl(ctx(t), "wa", []byte("rm")); Errno(err) != syscall.EBUSY {
		t.Errorf("rm of an attached world: %v, want EBUSY", err)
	}
	do(t, p, "kill r")
	do(t, p, "kill c")
	if _, err := p.WorldCtl(ctx(t), "wa", []byte("rm")); err != nil {
		t.Errorf("rm after kill: %v", err)
	}
}
