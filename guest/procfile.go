package guest

import (
	"io"
	"sync"

	"sandfs/ctl/msg"

	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

// procFileKind indexes procFiles.
type procFileKind int

const (
	kCtl procFileKind = iota
	kStdin
	kStdout
	kStderr
	kStatus
	kWait
	kErr
	kConfig
)

// procFiles is the directory procs/<n>/, in listing order. One table and
// one switch per operation, as 9front devproc.c does with its Q… kinds:
// the kinds share the slot's lifetime and open counting, and differ only
// in read and write.
//
//	ctl     rw  write: one verb (ctlVerbs); read: "n state pid"
//	stdin   w   bytes to the process's stdin (or its terminal)
//	stdout  r   blocking stream: output as it arrives, EOF at the end
//	stderr  r   the same for stderr (empty with a pty)
//	status  r   "n running pid=P" | "n exited code=C pid=P" |
//	            "n killed signal=S pid=P" | "n failed errno=E" | "n new"
//	wait    r   blocks until the process ends, then the status line
//	err     r   text of the last failed ctl write, or empty
//	config  r   the ctl messages that set the process up, one per line,
//	            ending with its start line: replayable into a new clone
var procFiles = []struct {
	name string
	mode p9.FileMode
}{
	kCtl:    {"ctl", 0o600},
	kStdin:  {"stdin", 0o200},
	kStdout: {"stdout", 0o400},
	kStderr: {"stderr", 0o400},
	kStatus: {"status", 0o444},
	kWait:   {"wait", 0o444},
	kErr:    {"err", 0o444},
	kConfig: {"config", 0o444},
}

// procFile is one open (or walked) file of procs/<n>/. Per-open state
// (the text snapshot) lives here, never in the proc.
type procFile struct {
	synth
	templatefs.NotDirectoryFile

	p      *proc
	kind   procFileKind
	opened bool // set by Open, cleared by Close (never concurrent with reads)

	mu     sync.Mutex // guards text and isText: p9 may run reads of one fid concurrently
	text   []byte     // the text being read (ctl, status, wait, err, config)
	isText bool       // text was generated for this open
}

var _ p9.File = (*procFile)(nil)

func newProcFile(c *conn, p *proc, k procFileKind) *procFile {
	return &procFile{
		synth: synth{c: c, qid: synthQID(p9.TypeRegular, qidSynth|uint64(p.n)<<8|uint64(k+1)), mode: p9.ModeRegular | procFiles[k].mode},
		p:     p, kind: k,
	}
}

// Walk implements p9.File.Walk.
func (f *procFile) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		return nil, newProcFile(f.c, f.p, f.kind), nil
	}
	return nil, nil, linux.ENOTDIR
}

// Open implements p9.File.Open.
func (f *procFile) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	m := procFiles[f.kind].mode
	switch mode.Mode() {
	case p9.ReadOnly:
		if m&0o400 == 0 {
			return f.qid, 0, linux.EACCES
		}
	case p9.WriteOnly:
		if m&0o200 == 0 {
			return f.qid, 0, linux.EACCES
		}
	default:
		if m&0o600 != 0o600 {
			return f.qid, 0, linux.EACCES
		}
	}
	if !f.p.open() {
		return f.qid, 0, linux.ENOENT
	}
	f.opened = true
	return f.qid, 0, nil
}

// Close implements p9.File.Close.
func (f *procFile) Close() error {
	if f.opened {
		f.opened = false
		f.p.close()
	}
	return nil
}

// ReadAt implements p9.File.ReadAt. Streams ignore the offset (they are
// pipes); text files are generated on the first read and again whenever a
// read starts at offset 0 (wait blocks there until the process ends).
func (f *procFile) ReadAt(b []byte, off int64) (int, error) {
	switch f.kind {
	case kStdout, kStderr:
		ctx, done := f.c.blocking()
		defer done()
		n, err := f.p.read(ctx, int(f.kind-kStdout)+1, b)
		if err == io.EOF {
			return 0, nil
		}
		return n, errOut(err)
	case kStdin:
		return 0, linux.EACCES
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if off == 0 || !f.isText {
		var s string
		switch f.kind {
		case kCtl:
			s = f.p.ctlLine()
		case kStatus:
			s = f.p.status()
		case kErr:
			s = f.p.errLine()
		case kConfig:
			s = f.p.config()
		case kWait:
			ctx, done := f.c.blocking()
			defer done()
			var err error
			if s, err = f.p.wait(ctx); err != nil {
				return 0, errOut(err)
			}
		}
		f.text, f.isText = []byte(s), true
	}
	return readText(f.text, b, off), nil
}

func readText(text, b []byte, off int64) int {
	if off >= int64(len(text)) {
		return 0
	}
	return copy(b, text[off:])
}

// WriteAt implements p9.File.WriteAt.
func (f *procFile) WriteAt(b []byte, off int64) (int, error) {
	switch f.kind {
	case kCtl:
		if err := f.p.ctl(b); err != nil {
			return 0, errOut(err)
		}
		return len(b), nil
	case kStdin:
		ctx, done := f.c.blocking()
		defer done()
		n, err := f.p.writeStdin(ctx, b)
		return n, errOut(err)
	}
	return 0, linux.EACCES
}

// errOut turns an error into what the p9 server sends: a bare errno.
func errOut(err error) error {
	if err == nil {
		return nil
	}
	return linux.Errno(msg.Errno(err))
}
