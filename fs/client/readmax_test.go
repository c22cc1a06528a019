package client

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
	"sandfs/fs/ninep"
)

// textTree is a root with one file, big, whose text is n bytes.
func textTree(n int) sfs.Dir {
	return sfs.Table[int]{
		{Name: "big", Mode: 0o444, New: func(n int, m iofs.FileMode) sfs.Node {
			return &sfs.TextFile{Mode: m, Gen: func(_ context.Context, b *bytes.Buffer) error {
				b.WriteString(strings.Repeat("x", n))
				return nil
			}}
		}},
	}.Dir(n, iofs.ModeDir|0o555, nil)
}

// dialTree serves root in process and returns a Client of it.
func dialTree(t *testing.T, root sfs.Dir) *Client {
	t.Helper()
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	srv := ninep.NewServer(root, nil)
	go srv.ServeConn(ctx, a, "")
	c, err := NewConn(b, "")
	if err != nil {
		t.Fatalf("NewConn: %v", err)
	}
	t.Cleanup(func() { c.Close(); cancel() })
	return c
}

func TestReadFileMax(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		max     int
		wantErr error
	}{
		{"under", 100, 1000, nil},
		{"exact", 1000, 1000, nil},
		{"over by one", 1001, 1000, syscall.E2BIG},
		{"far over", 3 << 20, 64 << 10, syscall.E2BIG},
		{"empty", 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialTree(t, textTree(tc.size))
			b, err := c.ReadFileMax("big", tc.max)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("ReadFileMax(%d-byte file, %d) = _, %v; want %v", tc.size, tc.max, err, tc.wantErr)
			}
			if err == nil && len(b) != tc.size {
				t.Errorf("ReadFileMax(%d-byte file, %d) = %d bytes", tc.size, tc.max, len(b))
			}
			if err != nil && !strings.Contains(err.Error(), "over") {
				t.Errorf("error %q does not say the bound", err)
			}
		})
	}
}

// TestReadFileBounded: ReadFile stops at MaxFile bytes (E2BIG).
func TestReadFileBounded(t *testing.T) {
	c := dialTree(t, textTree(MaxFile+1))
	if _, err := c.ReadFile("big"); !errors.Is(err, syscall.E2BIG) {
		t.Errorf("ReadFile of a file over MaxFile = %v; want E2BIG", err)
	}
}

// lyingFile is the p9 client's view of a server whose Rread and Rwrite
// counts exceed what was asked: the p9 client passes such a count on
// (fs/ninep/guard.go).
type lyingFile struct{ p9.File }

func (lyingFile) ReadAt(p []byte, off int64) (int, error)  { return len(p) + 10, nil }
func (lyingFile) WriteAt(p []byte, off int64) (int, error) { return len(p) + 10, nil }

// TestLyingServer: a count larger than asked is EIO, not a count the
// caller would slice past its buffer with.
func TestLyingServer(t *testing.T) {
	f := &File{path: "x", f: lyingFile{}}
	p := make([]byte, 8)
	if n, err := f.Read(p); n != 0 || !errors.Is(err, syscall.EIO) {
		t.Errorf("Read = %d, %v; want 0, EIO", n, err)
	}
	if n, err := f.Write(p); n != 0 || !errors.Is(err, syscall.EIO) {
		t.Errorf("Write = %d, %v; want 0, EIO", n, err)
	}
}
