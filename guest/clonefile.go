package guest

import (
	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

// cloneFile serves procs/clone. Opening it allocates a new process slot
// and the open file becomes that slot's ctl: reads give the slot number
// ("n\n"), writes are ctl messages. The slot lives on after the file is
// closed only if it was started (see the package doc).
type cloneFile struct {
	synth
	templatefs.NotDirectoryFile
	p *proc // set by Open
}

var _ p9.File = (*cloneFile)(nil)

func newCloneFile(c *conn) *cloneFile {
	return &cloneFile{synth: synth{c: c, qid: synthQID(p9.TypeRegular, qidClone), mode: p9.ModeRegular | 0o666}}
}

// Walk implements p9.File.Walk.
func (f *cloneFile) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		return nil, newCloneFile(f.c), nil
	}
	return nil, nil, linux.ENOTDIR
}

// Open implements p9.File.Open.
func (f *cloneFile) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	f.p = f.c.s.procs.alloc()
	return f.qid, 0, nil
}

// Close implements p9.File.Close.
func (f *cloneFile) Close() error {
	if f.p != nil {
		f.p.close()
		f.p = nil
	}
	return nil
}

// ReadAt implements p9.File.ReadAt.
func (f *cloneFile) ReadAt(b []byte, off int64) (int, error) {
	if f.p == nil {
		return 0, linux.EBADF
	}
	return readText([]byte(itoa(f.p.n)+"\n"), b, off), nil
}

// WriteAt implements p9.File.WriteAt.
func (f *cloneFile) WriteAt(b []byte, off int64) (int, error) {
	if f.p == nil {
		return 0, linux.EBADF
	}
	if err := f.p.ctl(b); err != nil {
		return 0, errOut(err)
	}
	return len(b), nil
}
