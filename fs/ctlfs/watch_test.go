package ctlfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/fs/client"
)

// TestWatchFile watches a guest directory through the daemon's tree
// (sandboxes/<id>/watch, bound to a real agent): events arrive, a
// refused message leaves the agent's text in the sandbox's err, and
// closing the file ends the watch in the guest.
func TestWatchFile(t *testing.T) {
	e := newGuestEnv(t, false)
	a := e.newSandbox(t, "t")
	c := e.client(t)
	if err := os.Mkdir(filepath.Join(a.root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Watch("t", "/nosuch", false); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("watch /nosuch: %v; want ENOENT", err)
	}
	if b, _ := c.ReadFile("sandboxes/t/err"); !strings.Contains(string(b), "nosuch") {
		t.Errorf("err after a refused watch = %q; want the agent's text naming the path", b)
	}

	w, err := c.Watch("t", "/d", true)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan client.Event, 64)
	go func() {
		defer close(events)
		for {
			ev, err := w.Next()
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	timeout := time.After(10 * time.Second)
	expect := func(want ...client.Event) {
		t.Helper()
		for len(want) > 0 {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the watch ended; still waiting for %v", want)
				}
				if ev == want[0] {
					want = want[1:]
				}
			case <-timeout:
				t.Fatalf("no %v within 10 s", want)
			}
		}
	}
	ev := func(typ, name string) client.Event { return client.Event{Type: typ, Name: name} }
	os.Mkdir(filepath.Join(a.root, "d/sub"), 0o755)
	expect(ev("create", "sub")) // the agent watches sub before it reports it
	os.WriteFile(filepath.Join(a.root, "d/sub/f x"), []byte("1"), 0o644)
	os.Remove(filepath.Join(a.root, "d/sub/f x"))
	expect(ev("create", "sub/f x"), ev("write", "sub/f x"), ev("remove", "sub/f x"))
	w.Close()
	select {
	case <-events: // Next failed: the file is closed
	case <-time.After(10 * time.Second):
		t.Fatal("Next still blocked 10 s after Close")
	}

	// The directory gone, the watch ends by itself (EOF).
	w2, err := c.Watch("t", "/d", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	os.RemoveAll(filepath.Join(a.root, "d"))
	for {
		_, err := w2.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next after the directory went: %v; want events then EOF", err)
		}
	}
}

// TestWatchFUSE: the transcript of docs/filesystem.md through a FUSE
// mount with plain shell: one fd, the message, then a blocking read.
func TestWatchFUSE(t *testing.T) {
	e := newGuestEnv(t, true)
	a := e.newSandbox(t, "t")
	if err := os.Mkdir(filepath.Join(a.root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := filepath.Join(e.mnt, "sandboxes/t")
	got := mustSh(t, sb, `exec 3<>watch; echo 'watch /d recursive' >&3; touch '`+a.root+`/d/a b'; head -1 <&3`)
	if got != "create 'a b'\n" {
		t.Errorf("first line read through FUSE = %q; want create 'a b'", got)
	}
	// Ctrl-C on the blocked read ends it (sh's own 60 s bound would fail
	// the test otherwise).
	if got := mustSh(t, sb, `exec 3<>watch; echo 'watch /d' >&3; timeout -s INT 1 cat <&3; echo $?`); got != "124\n" {
		t.Errorf("an interrupted read: %q; want timeout's 124", got)
	}
	if out, err := sh(t, sb, `exec 3<>watch; echo 'watch /nosuch' >&3`); err == nil {
		t.Errorf("watch /nosuch through FUSE succeeded: %q", out)
	}
}
