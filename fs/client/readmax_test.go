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
