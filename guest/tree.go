package guest

import (
	"strconv"
	"time"

	"github.com/hugelgupf/p9/fsimpl/readdir"
	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

// Synthetic QIDs live in the top half of the path space, away from the
// inode numbers fs/ uses: 1<<63 | n<<8 | kind.
const (
	qidSynth = uint64(1) << 63
	qidRoot  = qidSynth | 1
	qidProcs = qidSynth | 2
	qidClone = qidSynth | 3
)

func synthQID(t p9.QIDType, path uint64) p9.QID { return p9.QID{Type: t, Path: path} }

// synth holds what every synthetic node has in common: no xattrs, no
// locks, no symlink, fixed QID and mode.
type synth struct {
	p9.DefaultWalkGetAttr
	templatefs.NotSymlinkFile
	templatefs.XattrUnimplemented
	templatefs.NotLockable
	templatefs.NilSyncer
	templatefs.NoopRenamed

	c    *conn
	qid  p9.QID
	mode p9.FileMode // type and permission bits
}

var bootTime = time.Now()

// GetAttr implements p9.File.GetAttr.
func (s *synth) GetAttr(req p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	nlink := p9.NLink(1)
	if s.mode.IsDir() {
		nlink = 2
	}
	t := uint64(bootTime.Unix())
	return s.qid, p9.AttrMask{Mode: true, NLink: true, UID: true, GID: true, Size: true, ATime: true, MTime: true, CTime: true},
		p9.Attr{Mode: s.mode, NLink: nlink, BlockSize: 4096, ATimeSeconds: t, MTimeSeconds: t, CTimeSeconds: t}, nil
}

// SetAttr implements p9.File.SetAttr. Synthetic files accept and ignore
// size and time changes, so that shell redirection (O_TRUNC) works.
func (s *synth) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	if valid.Permissions || valid.UID || valid.GID {
		return linux.EPERM
	}
	return nil
}

// StatFS implements p9.File.StatFS.
func (s *synth) StatFS() (p9.FSStat, error) {
	return p9.FSStat{Type: 0x01021997, BlockSize: 4096, NameLength: 255}, nil // V9FS_MAGIC
}

// Close implements p9.File.Close.
func (s *synth) Close() error { return nil }

// synthDir adds the directory defaults: no data, nothing to create.
type synthDir struct {
	synth
	templatefs.ReadOnlyDir
}

// Resolve the embedded-method ambiguities in favour of synth.
func (d *synthDir) GetAttr(req p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	return d.synth.GetAttr(req)
}
func (d *synthDir) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	return d.synth.SetAttr(valid, attr)
}
func (d *synthDir) Readlink() (string, error)                    { return "", linux.EINVAL }
func (d *synthDir) SetXattr(string, []byte, p9.XattrFlags) error { return linux.ENOSYS }
func (d *synthDir) GetXattr(string) ([]byte, error)              { return nil, linux.ENOSYS }
func (d *synthDir) ListXattrs() ([]string, error)                { return nil, linux.ENOSYS }
func (d *synthDir) RemoveXattr(string) error                     { return linux.ENOSYS }
func (d *synthDir) Lock(int, p9.LockType, p9.LockFlags, uint64, uint64, string) (p9.LockStatus, error) {
	return p9.LockStatusError, linux.ENOSYS
}
func (d *synthDir) Renamed(p9.File, string) {}
func (d *synthDir) FSync() error            { return nil }

// Open implements p9.File.Open.
func (d *synthDir) Open(mode p9.OpenFlags) (p9.QID, uint32, error) { return d.qid, 0, nil }

// dirent is one entry of a synthetic directory listing.
func listing(offset uint64, count uint32, names []string, qids []p9.QID) (p9.Dirents, error) {
	m := make(map[string]p9.QID, len(names))
	for i, n := range names {
		m[n] = qids[i]
	}
	return readdir.Readdir(offset, count, names, m)
}

// rootDir is the agent's root:
//
//	ctl      machine-wide verbs (see agentVerbs)
//	err      text of the last failed ctl write
//	fs/      the guest's file system (see fsFile)
//	procs/   processes (see procsDir)
type rootDir struct{ synthDir }

func newRootDir(c *conn) *rootDir {
	return &rootDir{synthDir{synth: synth{c: c, qid: synthQID(p9.TypeDir, qidRoot), mode: p9.ModeDirectory | 0o555}}}
}

var _ p9.File = (*rootDir)(nil)

// Walk implements p9.File.Walk.
func (d *rootDir) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		return nil, newRootDir(d.c), nil
	}
	if len(names) != 1 {
		return nil, nil, linux.EINVAL
	}
	switch names[0] {
	case "ctl", "err":
		f := newAgentCtlFile(d.c, names[0] == "err")
		return []p9.QID{f.qid}, f, nil
	case "fs":
		f, err := d.c.s.fsRoot(d.c)
		if err != nil {
			return nil, nil, err
		}
		return []p9.QID{f.qid}, f, nil
	case "procs":
		p := newProcsDir(d.c)
		return []p9.QID{p.qid}, p, nil
	}
	return nil, nil, linux.ENOENT
}

// Readdir implements p9.File.Readdir.
func (d *rootDir) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	fs, err := d.c.s.fsRoot(d.c)
	if err != nil {
		return nil, err
	}
	fs.Close()
	return listing(offset, count, []string{"ctl", "err", "fs", "procs"},
		[]p9.QID{synthQID(p9.TypeRegular, qidAgentCtl), synthQID(p9.TypeRegular, qidAgentErr), fs.qid, synthQID(p9.TypeDir, qidProcs)})
}

// procsDir serves procs/: clone, then one directory per live process
// slot, in number order.
type procsDir struct{ synthDir }

func newProcsDir(c *conn) *procsDir {
	return &procsDir{synthDir{synth: synth{c: c, qid: synthQID(p9.TypeDir, qidProcs), mode: p9.ModeDirectory | 0o555}}}
}

var _ p9.File = (*procsDir)(nil)

// Walk implements p9.File.Walk.
func (d *procsDir) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		return nil, newProcsDir(d.c), nil
	}
	if len(names) != 1 {
		return nil, nil, linux.EINVAL
	}
	if names[0] == "clone" {
		f := newCloneFile(d.c)
		return []p9.QID{f.qid}, f, nil
	}
	n, err := strconv.Atoi(names[0])
	if err != nil || strconv.Itoa(n) != names[0] {
		return nil, nil, linux.ENOENT
	}
	p := d.c.s.procs.get(n)
	if p == nil {
		return nil, nil, linux.ENOENT
	}
	pd := newProcDir(d.c, p)
	return []p9.QID{pd.qid}, pd, nil
}

// Readdir implements p9.File.Readdir.
func (d *procsDir) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	names := []string{"clone"}
	qids := []p9.QID{synthQID(p9.TypeRegular, qidClone)}
	for _, n := range d.c.s.procs.list() {
		names = append(names, strconv.Itoa(n))
		qids = append(qids, synthQID(p9.TypeDir, qidSynth|uint64(n)<<8))
	}
	return listing(offset, count, names, qids)
}

// procDir serves procs/<n>/, whose files are the procFiles table.
type procDir struct {
	synthDir
	p *proc
}

func newProcDir(c *conn, p *proc) *procDir {
	return &procDir{synthDir{synth: synth{c: c, qid: synthQID(p9.TypeDir, qidSynth|uint64(p.n)<<8), mode: p9.ModeDirectory | 0o555}}, p}
}

var _ p9.File = (*procDir)(nil)

// Walk implements p9.File.Walk.
func (d *procDir) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		return nil, newProcDir(d.c, d.p), nil
	}
	if len(names) != 1 {
		return nil, nil, linux.EINVAL
	}
	if d.c.s.procs.get(d.p.n) != d.p {
		return nil, nil, linux.ENOENT // freed meanwhile
	}
	for i, e := range procFiles {
		if e.name == names[0] {
			f := newProcFile(d.c, d.p, procFileKind(i))
			return []p9.QID{f.qid}, f, nil
		}
	}
	return nil, nil, linux.ENOENT
}

// Readdir implements p9.File.Readdir.
func (d *procDir) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	var names []string
	var qids []p9.QID
	for i, e := range procFiles {
		names = append(names, e.name)
		qids = append(qids, synthQID(p9.TypeRegular, qidSynth|uint64(d.p.n)<<8|uint64(i+1)))
	}
	return listing(offset, count, names, qids)
}

func itoa(n int) string { return strconv.Itoa(n) }

// Rename implements p9.File.Rename (never called by the server).
func (s *synth) Rename(p9.File, string) error    { return linux.EPERM }
func (d *synthDir) Rename(p9.File, string) error { return linux.EPERM }
