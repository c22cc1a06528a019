package ninep

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"net"
	"sync"
	"syscall"
	"testing"

	sfs "sandfs/fs"
)

// dataFile is a regular file whose reads are logged and may fail from
// an offset on.
type dataFile struct {
	mu     sync.Mutex
	data   []byte
	failAt int64      // reads at or past it fail with EIO; -1: none
	reads  [][2]int64 // offset and count of each read
}

func (f *dataFile) Stat(context.Context) (sfs.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sfs.Attr{Mode: 0o666, Size: int64(len(f.data))}, nil
}

func (f *dataFile) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return dataHandle{f}, nil
}

func (f *dataFile) log() [][2]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][2]int64(nil), f.reads...)
}

type dataHandle struct{ f *dataFile }

func (h dataHandle) Read(_ context.Context, p []byte, off int64) (int, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, [2]int64{off, int64(len(p))})
	if f.failAt >= 0 && off >= f.failAt {
		return 0, syscall.EIO
	}
	if off >= int64(len(f.data)) {
		return 0, nil
	}
	return copy(p, f.data[off:]), nil
}

func (h dataHandle) Write(context.Context, []byte, int64) (int, error) { return 0, syscall.EROFS }
func (h dataHandle) Close() error                                      { return nil }

// dataDir holds the file "data".
type dataDir struct{ f *dataFile }

func (d dataDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | 0o777}, nil
}
func (d dataDir) List(context.Context) ([]sfs.Dirent, error) { return nil, nil }
func (d dataDir) Lookup(_ context.Context, n string) (sfs.Node, error) {
	if n == "data" {
		return d.f, nil
	}
	return nil, syscall.ENOENT
}

const testReadMax = 1024

// openAhead serves size bytes of pattern in a file under a read-ahead
// bind (reads of at most testReadMax) and opens it with flags.
func openAhead(t *testing.T, size int, flags sfs.OpenFlags) (*Remote, *dataFile, sfs.Handle) {
	t.Helper()
	f := &dataFile{data: pattern(size), failAt: -1}
	srv := NewServer(dataDir{f}, nil)
	r := NewDialing(Options{ReadMax: testReadMax, Dial: func(context.Context) (net.Conn, error) {
		c, s := net.Pipe()
		go srv.ServeConn(context.Background(), s, "")
		return c, nil
	}})
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	n, err := r.Bind("", sfs.Attr{Mode: iofs.ModeDir | 0o777}, BindOptions{ReadAhead: true}).(sfs.Dir).Lookup(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	h, err := n.(sfs.Opener).Open(ctx, flags)
	if err != nil {
		t.Fatal(err)
	}
	return r, f, h
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 / 3)
	}
	return b
}

// readAll reads h from off in reads of step bytes until a read returns
// 0 bytes or fails.
func readAll(h sfs.Handle, off int64, step int) ([]byte, int64, error) {
	var out []byte
	p := make([]byte, step)
	for {
		n, err := h.Read(context.Background(), p, off)
		out = append(out, p[:n]...)
		off += int64(n)
		if err != nil || n == 0 {
			return out, off, err
		}
	}
}

func TestReadAheadSequential(t *testing.T) {
	r, f, h := openAhead(t, 10000, syscall.O_RDONLY)
	got, _, err := readAll(h, 0, 100)
	if err != nil || !bytes.Equal(got, f.data) {
		t.Fatalf("read %d bytes (%v), want the file's %d", len(got), err, len(f.data))
	}
	// 100 reads of 100 bytes: a window of 1 read, then windows of 2,
	// to the end (the last one short), and one read at it: 1 + 2*5 + 1.
	reads := f.log()
	if len(reads) != 12 {
		t.Errorf("server reads %v, want 12", reads)
	}
	for _, rd := range reads {
		if rd[1] != testReadMax {
			t.Errorf("server read %v, want %d bytes", rd, testReadMax)
		}
	}
	h.Close()
	if n := r.raHeld.Load(); n != 0 {
		t.Errorf("read-ahead budget holds %d bytes after close", n)
	}
}

func TestReadAheadRandomAsked(t *testing.T) {
	r, f, h := openAhead(t, 10000, syscall.O_RDONLY)
	p := make([]byte, 100)
	for _, off := range []int64{5000, 200, 9000, 4000} {
		n, err := h.Read(context.Background(), p, off)
		if err != nil || n != 100 || !bytes.Equal(p, f.data[off:off+100]) {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
	}
	want := [][2]int64{{5000, 100}, {200, 100}, {9000, 100}, {4000, 100}}
	if reads := f.log(); len(reads) != len(want) || reads[0] != want[0] || reads[3] != want[3] {
		t.Errorf("server reads %v, want %v (random reads as asked)", reads, want)
	}
	// A sequential read after them reads ahead; a jump back drops it.
	if n, _ := h.Read(context.Background(), p, 4100); n != 100 {
		t.Fatalf("read at 4100: %d", n)
	}
	if n, _ := h.Read(context.Background(), p, 0); n != 100 || !bytes.Equal(p, f.data[:100]) {
		t.Fatalf("read at 0 after a window at 4100: %d %q", n, p)
	}
	reads := f.log()
	if reads[4] != [2]int64{4100, testReadMax} || reads[5] != [2]int64{0, 100} {
		t.Errorf("server reads %v, want a window at 4100, then 100 bytes at 0", reads[4:])
	}
	if n := r.raHeld.Load(); n != 0 {
		t.Errorf("read-ahead budget holds %d bytes with no window", n)
	}
}

func TestReadAheadLargeRead(t *testing.T) {
	_, f, h := openAhead(t, 10000, syscall.O_RDONLY)
	p := make([]byte, 5000)
	n, err := h.Read(context.Background(), p, 0)
	if err != nil || n != 5000 || !bytes.Equal(p, f.data[:5000]) {
		t.Fatalf("read of 5000 over several windows: %d, %v", n, err)
	}
}

func TestReadAheadEOFAndGrowth(t *testing.T) {
	_, f, h := openAhead(t, 1500, syscall.O_RDONLY)
	got, end, err := readAll(h, 0, 512)
	if err != nil || end != 1500 || !bytes.Equal(got, f.data) {
		t.Fatalf("read %d bytes to %d (%v)", len(got), end, err)
	}
	f.mu.Lock()
	f.data = append(f.data, bytes.Repeat([]byte("x"), 3000)...)
	f.mu.Unlock()
	more, end2, err := readAll(h, end, 512)
	if err != nil || end2 != 4500 || !bytes.Equal(more, f.data[1500:]) {
		t.Fatalf("after the file grew, read %d more bytes to %d (%v), want 3000", len(more), end2, err)
	}
}

func TestReadAheadErrorAtItsRange(t *testing.T) {
	_, f, h := openAhead(t, 10000, syscall.O_RDONLY)
	f.failAt = 3 * testReadMax // the second window's second read fails
	got, end, err := readAll(h, 0, 100)
	if !errors.Is(err, syscall.EIO) || end != f.failAt || !bytes.Equal(got, f.data[:end]) {
		t.Fatalf("read %d bytes to %d, then %v; want the bytes to %d, then EIO", len(got), end, err, f.failAt)
	}
}

func TestReadAheadClosed(t *testing.T) {
	r, _, h := openAhead(t, 10000, syscall.O_RDONLY)
	p := make([]byte, 100)
	if _, err := h.Read(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	if r.raHeld.Load() == 0 {
		t.Fatal("no window held after a sequential read")
	}
	h.Close()
	if _, err := h.Read(context.Background(), p, 100); !errors.Is(err, syscall.EBADF) {
		t.Errorf("read after close: %v, want EBADF", err)
	}
	if n := r.raHeld.Load(); n != 0 {
		t.Errorf("read-ahead budget holds %d bytes after close", n)
	}
}

func TestReadAheadNotForWriters(t *testing.T) {
	_, f, h := openAhead(t, 10000, syscall.O_RDWR)
	if _, _, err := readAll(h, 0, 100); err != nil {
		t.Fatal(err)
	}
	if reads := f.log(); len(reads) != 101 || reads[0] != [2]int64{0, 100} {
		t.Errorf("an open for writing read ahead: %d server reads, first %v", len(reads), reads[0])
	}
}
