package ninep

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sfs "sandfs/fs"
)

// msgFile is a message file anyone may read and write.
type msgFile struct{}

func (msgFile) Stat(context.Context) (sfs.Attr, error)        { return sfs.Attr{Mode: 0o666}, nil }
func (msgFile) Text(_ context.Context, b *bytes.Buffer) error { b.WriteString("hi\n"); return nil }
func (msgFile) Message(context.Context, []byte) error         { return nil }

// twoDir is a directory holding itself as dir, a message file and a
// stream whose reads block.
type twoDir struct{ stream *blockFile }

func (d twoDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | 0o777}, nil
}
func (d twoDir) List(context.Context) ([]sfs.Dirent, error) { return nil, nil }
func (d twoDir) Lookup(_ context.Context, n string) (sfs.Node, error) {
	switch n {
	case "msg":
		return msgFile{}, nil
	case "stream":
		return d.stream, nil
	case "dir":
		return d, nil
	}
	return nil, syscall.ENOENT
}

// dialingRemote returns a Remote over a fresh server of twoDir, dialling
// over pipes, and the count of its dials.
func dialingRemote(t *testing.T, opt Options) (*Remote, *blockFile, *atomic.Int32) {
	f := &blockFile{ended: make(chan error, 16)}
	srv := NewServer(twoDir{f}, nil)
	var dials atomic.Int32
	opt.Dial = func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		c, s := net.Pipe()
		go srv.ServeConn(context.Background(), s, "")
		return c, nil
	}
	r := NewDialing(opt)
	t.Cleanup(func() { r.Close() })
	return r, f, &dials
}

// TestRemoteBind: a bind point answers Stat without dialling; lookups
// share one session; a Private file's open gets a session of its own,
// which an interrupted read closes; Check refuses before any dial;
// Close ends everything.
func TestRemoteBind(t *testing.T) {
	var refuse atomic.Bool
	r, stream, dials := dialingRemote(t, Options{
		Name:      "test",
		OpTimeout: 5 * time.Second,
		Private:   func(p string) bool { return p == "dir/stream" },
		Check: func() error {
			if refuse.Load() {
				return syscall.EBUSY
			}
			return nil
		},
	})
	ctx := context.Background()
	d := r.Bind("dir", sfs.Attr{Mode: iofs.ModeDir | 0o500}, BindOptions{Messages: true})
	if a, err := d.Stat(ctx); err != nil || a.Mode != iofs.ModeDir|0o500 || dials.Load() != 0 {
		t.Fatalf("bind point Stat = %v, %v after %d dials; want its own attributes, no dial", a.Mode, err, dials.Load())
	}
	n, err := d.Lookup(ctx, "msg")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Lookup(ctx, "stream"); err != nil || dials.Load() != 1 {
		t.Fatalf("two lookups: %v, %d dials; want one shared session", err, dials.Load())
	}
	tr := n.(sfs.Truncater)
	if err := tr.Truncate(ctx, 0); err != nil {
		t.Errorf("Truncate(0) under a Messages bind = %v; want nil", err)
	}
	if err := tr.Truncate(ctx, 5); !errors.Is(err, syscall.EPERM) {
		t.Errorf("Truncate(5) under a Messages bind = %v; want EPERM", err)
	}

	h, err := sfs.Open(ctx, r.File("dir/stream"), sfs.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	if dials.Load() != 2 {
		t.Errorf("open of a Private file: %d dials; want a second session", dials.Load())
	}
	rctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := h.Read(rctx, make([]byte, 8), 0); !errors.Is(err, syscall.EINTR) {
		t.Errorf("interrupted read = %v; want EINTR", err)
	}
	select {
	case <-stream.ended: // the server saw its connection end
	case <-time.After(10 * time.Second):
		t.Fatal("the server's read did not end after the interrupt")
	}
	h.Close()

	refuse.Store(true)
	before := dials.Load()
	if _, err := sfs.Open(ctx, r.File("dir/stream"), sfs.ReadOnly); !errors.Is(err, syscall.EBUSY) || dials.Load() != before {
		t.Errorf("open while Check refuses = %v after %d new dials; want EBUSY, none", err, dials.Load()-before)
	}
	refuse.Store(false)

	r.Close()
	select {
	case <-r.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if _, err := d.Lookup(ctx, "msg"); !errors.Is(err, syscall.EIO) {
		t.Errorf("lookup after Close = %v; want EIO", err)
	}
}

// TestRemoteFailedDialShared: requests waiting for a dial that fails get
// its error; they do not dial again one after another. A later request
// dials afresh.
func TestRemoteFailedDialShared(t *testing.T) {
	var dials, checks atomic.Int32
	release := make(chan struct{})
	r := NewDialing(Options{Name: "test",
		Check: func() error { checks.Add(1); return nil },
		Dial: func(ctx context.Context) (net.Conn, error) {
			dials.Add(1)
			<-release
			return nil, syscall.ECONNREFUSED
		}})
	t.Cleanup(func() { r.Close() })
	d := r.Bind("dir", sfs.Attr{Mode: iofs.ModeDir | 0o500}, BindOptions{})
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := d.Lookup(context.Background(), "msg")
			errs <- err
		}()
	}
	for dials.Load() == 0 || checks.Load() < n {
		time.Sleep(time.Millisecond)
	}
	// Every request has passed Check, a few instructions before it
	// queues behind the dial.
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range n {
		if err := <-errs; !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Lookup = %v; want the dial's ECONNREFUSED", err)
		}
	}
	if got := dials.Load(); got != 1 {
		t.Errorf("%d dials for %d waiting requests; want 1", got, n)
	}
	if _, err := d.Lookup(context.Background(), "msg"); err == nil || dials.Load() != 2 {
		t.Errorf("a later Lookup: %v after %d dials; want a new dial (2)", err, dials.Load())
	}
}

// TestRemoteBlocking: a file Options.Blocking names opens as an
// sfs.BlockingWriter (its writes a transport lets an interrupt end);
// others, a message file among them, do not.
func TestRemoteBlocking(t *testing.T) {
	r, _, _ := dialingRemote(t, Options{Name: "test", Blocking: func(p string) bool { return p == "dir/stream" }})
	ctx := context.Background()
	for path, want := range map[string]bool{"dir/stream": true, "dir/msg": false} {
		flags := sfs.WriteOnly
		if path == "dir/stream" {
			flags = sfs.ReadOnly // its mode: 0444
		}
		h, err := sfs.Open(ctx, r.File(path), flags)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		if _, got := h.(sfs.BlockingWriter); got != want {
			t.Errorf("%s opens as a BlockingWriter: %v; want %v", path, got, want)
		}
		h.Close()
	}
}
