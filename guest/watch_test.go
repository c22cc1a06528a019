package guest

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// rawEvent encodes one struct inotify_event with its name padded to pad
// bytes (0: the name's length plus a NUL).
func rawEvent(wd int32, mask uint32, name string, pad int) []byte {
	if pad == 0 && name != "" {
		pad = len(name) + 1
	}
	b := make([]byte, inotifyHeader+pad)
	binary.NativeEndian.PutUint32(b[0:], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(pad))
	copy(b[inotifyHeader:], name)
	return b
}

func TestParseInotify(t *testing.T) {
	two := append(rawEvent(1, unix.IN_CREATE, "a.txt", 16), rawEvent(2, unix.IN_IGNORED, "", 0)...)
	long := rawEvent(1, unix.IN_CREATE, "x", 0)
	binary.NativeEndian.PutUint32(long[12:], 1<<31) // a name longer than the read
	for _, tc := range []struct {
		name    string
		b       []byte
		want    []string // wd:name of each event
		wantErr bool
	}{
		{"empty", nil, nil, false},
		{"two events, padded name", two, []string{"1:a.txt", "2:"}, false},
		{"short header", two[:inotifyHeader-1], nil, true},
		{"name cut", two[:inotifyHeader+3], nil, true},
		{"event then garbage", append(rawEvent(3, unix.IN_MODIFY, "b", 0), 1, 2, 3), []string{"3:b"}, true},
		{"name length past the end", long, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := parseInotify(tc.b)
			var got []string
			for _, e := range evs {
				got = append(got, strings.Join([]string{strconv.Itoa(int(e.wd)), e.name}, ":"))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || (err != nil) != tc.wantErr {
				t.Errorf("parseInotify = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestEventType(t *testing.T) {
	for mask, want := range map[uint32]string{
		unix.IN_CREATE: "create", unix.IN_CREATE | unix.IN_ISDIR: "create", unix.IN_MOVED_TO: "create",
		unix.IN_MODIFY: "write", unix.IN_DELETE: "remove", unix.IN_MOVED_FROM: "rename",
		unix.IN_ATTRIB: "chmod", unix.IN_OPEN: "", unix.IN_CLOSE_WRITE: "",
	} {
		if got := eventType(mask); got != want {
			t.Errorf("eventType(%#x) = %q; want %q", mask, got, want)
		}
	}
}

// queueWatcher is a watcher with no descriptor, to test its queue.
func queueWatcher() *watcher { return &watcher{change: make(chan struct{})} }

// drain reads w until nothing is queued, through a buffer of size n.
func drain(t *testing.T, w *watcher, n int) []string {
	t.Helper()
	w.end()
	var out []byte
	b := make([]byte, n)
	for {
		k, err := w.read(context.Background(), b)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if k == 0 {
			break
		}
		out = append(out, b[:k]...)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

func TestWatchQueueOverflow(t *testing.T) {
	w := queueWatcher()
	total := maxWatchQueue + 100
	for i := range total {
		w.push("create f" + strconv.Itoa(i))
	}
	lines := drain(t, w, 64<<10)
	if n := len(lines); n != maxWatchQueue {
		t.Fatalf("%d lines queued of %d; want the cap %d", n, total, maxWatchQueue)
	}
	if last := lines[len(lines)-1]; last != "overflow" {
		t.Errorf("last line %q; want overflow (the loss reported, not silent)", last)
	}
	if lines[0] != "create f0" || lines[len(lines)-2] != "create f"+strconv.Itoa(maxWatchQueue-2) {
		t.Errorf("lines kept: first %q, last event %q", lines[0], lines[len(lines)-2])
	}
}

func TestWatchQueueOverflowThenMore(t *testing.T) {
	w := queueWatcher()
	for i := range maxWatchQueue + 5 {
		w.push("write f" + strconv.Itoa(i))
	}
	b := make([]byte, 1<<20)
	if _, err := w.read(context.Background(), b); err != nil { // drains all
		t.Fatal(err)
	}
	w.push("remove g")
	lines := drain(t, w, 64<<10)
	if strings.Join(lines, ",") != "overflow,remove g" {
		t.Errorf("after a drained overflow: %q; want overflow, then the new event", lines)
	}
}

func TestWatchQueueSmallReads(t *testing.T) {
	w := queueWatcher()
	want := []string{"create 'a b'", "write " + strings.Repeat("x", 100), "remove c"}
	for _, l := range want {
		w.push(l)
	}
	got := drain(t, w, 7) // smaller than a line: lines come in pieces, in order
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read in 7-byte pieces: %q; want %q", got, want)
	}
}

func TestWatchReadEndsWithContext(t *testing.T) {
	w := queueWatcher()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.read(ctx, make([]byte, 10)); !errors.Is(err, syscall.EINTR) {
		t.Errorf("read with an ended context: %v; want EINTR", err)
	}
}

// rootWatcher watches rel under a temp root; the root's descriptor
// closes at cleanup.
func rootWatcher(t *testing.T, root, rel string, recursive bool) *watcher {
	t.Helper()
	tree := newFSTree(root)
	if tree.err != nil {
		t.Fatal(tree.err)
	}
	w, err := newWatcher(tree, rel, recursive)
	if err != nil {
		unix.Close(tree.rootFD)
		t.Fatalf("newWatcher(%s): %v", rel, err)
	}
	t.Cleanup(func() { w.close(); unix.Close(tree.rootFD) })
	return w
}

// expect reads w until it has seen every line of want (in order, other
// lines between them allowed), failing after 10 s; it returns the lines
// seen.
func expect(t *testing.T, w *watcher, want ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen []string
	buf, rest := make([]byte, 4096), ""
	for len(want) > 0 {
		n, err := w.read(ctx, buf)
		if err != nil || n == 0 {
			t.Fatalf("still waiting for %q after %q (read: %d, %v)", want, seen, n, err)
		}
		rest += string(buf[:n])
		for {
			line, more, ok := strings.Cut(rest, "\n")
			if !ok {
				break
			}
			rest = more
			seen = append(seen, line)
			if len(want) > 0 && line == want[0] {
				want = want[1:]
			}
		}
	}
	return seen
}

func TestWatcherEvents(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "d/old"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := rootWatcher(t, root, "/d", true)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "d/a b.txt"), []byte("x"), 0o644))
	must(os.Chmod(filepath.Join(root, "d/a b.txt"), 0o600))
	must(os.Remove(filepath.Join(root, "d/a b.txt")))
	expect(t, w, "create 'a b.txt'", "write 'a b.txt'", "chmod 'a b.txt'", "remove 'a b.txt'")

	// A directory that existed and one made later are both watched.
	must(os.WriteFile(filepath.Join(root, "d/old/f"), nil, 0o644))
	must(os.Mkdir(filepath.Join(root, "d/new"), 0o755))
	expect(t, w, "create old/f", "create new")
	must(os.WriteFile(filepath.Join(root, "d/new/g"), nil, 0o644))
	must(os.Rename(filepath.Join(root, "d/new/g"), filepath.Join(root, "d/new/h")))
	expect(t, w, "create new/g", "rename new/g", "create new/h")

	// The watched directory gone: the stream ends.
	must(os.RemoveAll(filepath.Join(root, "d")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		n, err := w.read(ctx, make([]byte, 4096))
		if err != nil {
			t.Fatalf("read after the directory went: %v; want EOF", err)
		}
		if n == 0 {
			break
		}
	}
}

func TestWatcherNotRecursive(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := rootWatcher(t, root, "/", false)
	os.WriteFile(filepath.Join(root, "sub/inner"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "top"), nil, 0o644)
	// inotify keeps the order: once top is seen, inner would have been.
	for _, l := range expect(t, w, "create top") {
		if strings.Contains(l, "inner") {
			t.Errorf("a watch without recursive saw %q", l)
		}
	}
}

// TestWatchFile drives the agent's watch file over 9P: the grammar,
// a read before the message, one watch per open, events, and the watch
// released at clunk.
func TestWatchFile(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	if err := os.Mkdir(filepath.Join(ts.root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, root, "watch", p9.ReadWrite)
	if _, err := f.ReadAt(make([]byte, 10), 0); !errors.Is(err, linux.EINVAL) {
		t.Errorf("read before a watch message: %v; want EINVAL", err)
	}
	for m, want := range map[string]linux.Errno{
		"watch":                linux.EINVAL,
		"watch w":              linux.EINVAL, // not absolute
		"watch /w deep":        linux.EINVAL,
		"watch /nosuch":        linux.ENOENT,
		"unwatch /w":           linux.EINVAL,
		"watch /w recursive x": linux.EINVAL,
		"watch '/w\x00'":       linux.EINVAL,
		"watch " + msg.Quote(strings.Repeat("/a", 5000)): linux.E2BIG,
	} {
		if err := write(f, m); !errors.Is(err, want) {
			t.Errorf("write %.40q: %v; want %v", m, err, want)
		}
	}
	if e := readFile(t, root, "err"); !strings.HasPrefix(e, "watch:") && !strings.HasPrefix(e, "ctl:") {
		t.Errorf("err after a refused watch message: %q", e)
	}
	// A symbolic link anywhere in PATH is refused, as everywhere in fs/.
	if err := os.MkdirAll(filepath.Join(ts.root, "real/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(ts.root, "link")); err != nil {
		t.Fatal(err)
	}
	for m, want := range map[string]linux.Errno{
		"watch /link":           linux.ENOTDIR,
		"watch /link/sub":       linux.ELOOP,
		"watch /link recursive": linux.ENOTDIR,
	} {
		g := openFile(t, root, "watch", p9.ReadWrite)
		if err := write(g, m); !errors.Is(err, want) {
			t.Errorf("write %q (through a symlink): %v; want %v", m, err, want)
		}
		if e := readFile(t, root, "err"); !strings.Contains(e, "symbolic link") {
			t.Errorf("err after %q: %q; want it to name the symbolic link", m, e)
		}
		g.Close()
	}
	mustWrite(t, f, "watch /w recursive\n")
	if err := write(f, "watch /w"); !errors.Is(err, linux.EBUSY) {
		t.Errorf("a second watch message on one open: %v; want EBUSY", err)
	}
	if n := ts.srv.watches.Load(); n != 1 {
		t.Errorf("%d watches open; want 1", n)
	}
	if err := os.WriteFile(filepath.Join(ts.root, "w/x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	n, err := f.ReadAt(b, 0)
	if err != nil || !strings.HasPrefix(string(b[:n]), "create x\n") {
		t.Errorf("read = %q, %v; want create x", b[:n], err)
	}
	f.Close()
	deadline := time.Now().Add(10 * time.Second)
	for ts.srv.watches.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ts.srv.watches.Load(); n != 0 {
		t.Errorf("%d watches open after the clunk; want 0", n)
	}
}

func TestWatchCap(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	for i := range maxWatches {
		f := openFile(t, root, "watch", p9.ReadWrite)
		if err := write(f, "watch /"); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	f := openFile(t, root, "watch", p9.ReadWrite)
	if err := write(f, "watch /"); !errors.Is(err, linux.EMFILE) {
		t.Errorf("watch %d: %v; want EMFILE (the cap)", maxWatches+1, err)
	}
}

// TestWatcherMovedInTree: a directory tree moved into a recursive watch
// had no events of its own there; its entries are reported as created
// and its directories watched.
func TestWatcherMovedInTree(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"w", "out/t/inner"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "out/t/inner/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w := rootWatcher(t, root, "/w", true)
	if err := os.Rename(filepath.Join(root, "out/t"), filepath.Join(root, "w/t")); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "create t", "create t/inner", "create t/inner/f")
	if err := os.WriteFile(filepath.Join(root, "w/t/inner/g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "create t/inner/g")
}
