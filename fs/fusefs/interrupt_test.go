package fusefs

import (
	"bytes"
	"context"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
	"sandfs/test/testenv"
)

// interrupted runs call on a locked OS thread of its own and, once the
// tree's operation has begun (started), sends that thread SIGURG every
// 50 ms until call returns: Go's handler runs it (SA_RESTART), and the
// FUSE request, which sees a signal pending, gets a FUSE_INTERRUPT. The
// test fails if call ends before the operation began or takes 10 s.
func interrupted(t *testing.T, started <-chan struct{}, call func() error) error {
	t.Helper()
	tid := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the signals go to this thread
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		done <- call()
	}()
	th := <-tid
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the call ended before the tree's operation began: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the tree's operation did not begin")
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		unix.Tgkill(os.Getpid(), th, syscall.SIGURG)
		select {
		case err := <-done:
			return err
		case <-tick.C:
		case <-deadline:
			t.Fatal("the interrupted call did not end")
		}
	}
}

// TestWriteNotInterrupted: a signal to a writer whose message is being
// carried out does not end its write with EINTR (on which Go's Write and
// shells write the message again, doing the verb twice: TestMakeRunLabRestart's
// "snapshot keep1" failed with EEXIST so); the message runs once and the
// write returns its whole length.
func TestWriteNotInterrupted(t *testing.T) {
	testenv.NeedFUSE(t)
	var calls atomic.Int32
	started := make(chan struct{}, 1)
	ctlFile := func(struct{}, os.FileMode) sfs.Node {
		return &sfs.CtlFile{
			TextFile: sfs.TextFile{Mode: 0o666, Gen: func(context.Context, *bytes.Buffer) error { return nil }},
			Msg: func(ctx context.Context, m []byte) error {
				calls.Add(1)
				started <- struct{}{}
				select { // a verb that takes a while and gives up if asked to
				case <-time.After(time.Second):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		}
	}
	dir := t.TempDir()
	m, err := New(dir, sfs.Table[struct{}]{{Name: "ctl", Mode: 0o666, New: ctlFile}}.Dir(struct{}{}, 0o777, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	var n int
	err = interrupted(t, started, func() error {
		fd, err := unix.Open(filepath.Join(dir, "ctl"), unix.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		n, err = unix.Write(fd, []byte("verb\n")) // no retry on EINTR here
		return err
	})
	if err != nil || n != 5 {
		t.Errorf("write = %d, %v; want 5, nil (the message ran)", n, err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("message ran %d times; want 1", n)
	}
}

// stdinNode opens a handle whose writes block until their context ends,
// as a process's stdin with a full pipe does; each write that begins is
// announced on started.
type stdinNode struct{ started chan struct{} }

func (stdinNode) Stat(context.Context) (sfs.Attr, error) { return sfs.Attr{Mode: 0o666}, nil }
func (n stdinNode) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return stdinHandle(n), nil
}

type stdinHandle struct{ started chan struct{} }

func (stdinHandle) Read(context.Context, []byte, int64) (int, error) { return 0, syscall.EBADF }
func (h stdinHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	h.started <- struct{}{}
	<-ctx.Done()
	return 0, syscall.EINTR
}
func (stdinHandle) Close() error   { return nil }
func (stdinHandle) BlocksOnWrite() {}

// TestBlockingWriteInterrupted: a write to an sfs.BlockingWriter (a full
// stdin) still ends with EINTR when the writer is interrupted (Ctrl-C).
func TestBlockingWriteInterrupted(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := t.TempDir()
	node := stdinNode{started: make(chan struct{}, 1)}
	root := sfs.Table[struct{}]{{Name: "stdin", Mode: 0o666, New: func(struct{}, os.FileMode) sfs.Node { return node }}}
	m, err := New(dir, root.Dir(struct{}{}, 0o777, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	err = interrupted(t, node.started, func() error {
		fd, err := unix.Open(filepath.Join(dir, "stdin"), unix.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte("data\n"))
		return err
	})
	if err != unix.EINTR {
		t.Errorf("interrupted write to a blocking writer = %v; want EINTR", err)
	}
}

// slowDir is a directory whose Mkdir takes a second and gives up if its
// context ends, as a verb of the tree that waits on something may.
type slowDir struct {
	calls   atomic.Int32
	made    atomic.Bool
	started chan struct{}
}

func (d *slowDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | 0o777}, nil
}
func (d *slowDir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if name != "new" || !d.made.Load() {
		return nil, syscall.ENOENT
	}
	return &slowDir{}, nil
}
func (d *slowDir) List(context.Context) ([]sfs.Dirent, error) { return nil, nil }
func (d *slowDir) Mkdir(ctx context.Context, name string, _ iofs.FileMode) (sfs.Node, error) {
	d.calls.Add(1)
	if d.made.Load() {
		return nil, syscall.EEXIST
	}
	d.started <- struct{}{}
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.made.Store(true)
	return &slowDir{}, nil
}

// TestMkdirNotInterrupted: a request that changes the tree (here mkdir)
// runs to its end when its caller takes a signal, as a write does
// (TestWriteNotInterrupted): an EINTR after the change would have the
// caller retry it (Go's os.Mkdir does) and fail with EEXIST.
func TestMkdirNotInterrupted(t *testing.T) {
	testenv.NeedFUSE(t)
	d := &slowDir{started: make(chan struct{}, 1)}
	dir := t.TempDir()
	m, err := New(dir, d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	err = interrupted(t, d.started, func() error {
		return unix.Mkdir(filepath.Join(dir, "new"), 0o755) // no retry on EINTR here
	})
	if err != nil {
		t.Errorf("interrupted mkdir = %v; want success (the directory was made)", err)
	}
	if n := d.calls.Load(); n != 1 {
		t.Errorf("Mkdir ran %d times; want 1", n)
	}
	if fi, err := os.Stat(filepath.Join(dir, "new")); err != nil || !fi.IsDir() {
		t.Errorf("stat new = %v, %v; want a directory", fi, err)
	}
}
