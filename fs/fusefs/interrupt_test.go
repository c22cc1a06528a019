package fusefs

import (
	"bytes"
	"context"
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

	type result struct {
		n   int
		err error
	}
	tid := make(chan int, 1)
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // the signal goes to this thread
		defer runtime.UnlockOSThread()
		fd, err := unix.Open(filepath.Join(dir, "ctl"), unix.O_WRONLY, 0)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer unix.Close(fd)
		tid <- unix.Gettid()
		n, err := unix.Write(fd, []byte("verb\n")) // no retry on EINTR here
		done <- result{n, err}
	}()
	th := <-tid
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("write ended before the message ran: %d, %v", r.n, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the message did not start")
	}
	// SIGURG: Go's handler runs it (SA_RESTART), the FUSE request sees a
	// signal pending and the kernel sends FUSE_INTERRUPT.
	for range 3 {
		unix.Tgkill(os.Getpid(), th, syscall.SIGURG)
		time.Sleep(50 * time.Millisecond)
	}
	r := <-done
	if r.err != nil || r.n != 5 {
		t.Errorf("write = %d, %v; want 5, nil (the message ran)", r.n, r.err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("message ran %d times; want 1", n)
	}
}

// stdinNode opens a handle whose writes block until their context ends,
// as a process's stdin with a full pipe does.
type stdinNode struct{}

func (stdinNode) Stat(context.Context) (sfs.Attr, error) { return sfs.Attr{Mode: 0o666}, nil }
func (stdinNode) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return stdinHandle{}, nil
}

type stdinHandle struct{}

func (stdinHandle) Read(context.Context, []byte, int64) (int, error) { return 0, syscall.EBADF }
func (stdinHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
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
	root := sfs.Table[struct{}]{{Name: "stdin", Mode: 0o666, New: func(struct{}, os.FileMode) sfs.Node { return stdinNode{} }}}
	m, err := New(dir, root.Dir(struct{}{}, 0o777, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	tid := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fd, err := unix.Open(filepath.Join(dir, "stdin"), unix.O_WRONLY, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		tid <- unix.Gettid()
		_, err = unix.Write(fd, []byte("data\n"))
		done <- err
	}()
	th := <-tid
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			if err != unix.EINTR {
				t.Errorf("interrupted write to a blocking writer = %v; want EINTR", err)
			}
			return
		case <-time.After(50 * time.Millisecond):
			unix.Tgkill(os.Getpid(), th, syscall.SIGURG)
		case <-deadline:
			t.Fatal("the blocked write did not end on the interrupt")
		}
	}
}
