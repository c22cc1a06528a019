package ninep

import (
	"errors"
	"strings"
	"testing"

	"github.com/hugelgupf/p9/p9"
)

// lyingFile answers ReadAt and WriteAt with n, or panics.
type lyingFile struct {
	p9.File
	n     int
	panic bool
}

func (f lyingFile) ReadAt(p []byte, off int64) (int, error) {
	if f.panic {
		panic("bytes completed (1048565)) > requested (32)")
	}
	return f.n, nil
}

func (f lyingFile) WriteAt(p []byte, off int64) (int, error) { return f.ReadAt(p, off) }

func TestReadWriteP9(t *testing.T) {
	for _, c := range []struct {
		name string
		f    lyingFile
		want string // "" = no error
	}{
		{"honest", lyingFile{n: 32}, ""},
		{"short", lyingFile{n: 3}, ""},
		{"longer than asked", lyingFile{n: 100}, "of 100 bytes for a"},
		{"negative", lyingFile{n: -1}, "of -1 bytes"},
		{"p9 panics", lyingFile{panic: true}, "panic: bytes completed"},
	} {
		for _, op := range []struct {
			name string
			fn   func(p9.File, []byte, int64) (int, error)
		}{{"ReadP9", ReadP9}, {"WriteP9", WriteP9}} {
			n, err := op.fn(c.f, make([]byte, 32), 0)
			switch {
			case c.want == "" && (err != nil || n != c.f.n):
				t.Errorf("%s: %s = %d, %v; want %d, nil", c.name, op.name, n, err, c.f.n)
			case c.want != "" && (n != 0 || !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s: %s = %d, %v; want 0, ErrBadReply %q", c.name, op.name, n, err, c.want)
			}
		}
	}
}
