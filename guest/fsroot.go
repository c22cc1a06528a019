package guest

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"sandfs/ctl/msg"

	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// fsFile serves fs/: the guest's file system under the server's root,
// read and write. Confinement rests on three rules:
//
//   - every node holds an O_PATH|O_NOFOLLOW descriptor, and a child is
//     reached only by openat(parent, name) with one name that is not "",
//     ".", ".." and has no "/" (the p9 server checks too);
//   - the server never follows a symlink: walking a symlink gives the link
//     itself (p9 refuses to walk further through a non-directory), Open of
//     a link fails with ELOOP, Readlink returns its text for the client
//     to interpret;
//   - creations and changes use the *at calls relative to the parent
//     descriptor with AT_SYMLINK_NOFOLLOW, or the node's own descriptor
//     (re-opened through /proc/self/fd, which names that inode, never a
//     path).
//
// Like gVisor's gofer, names are never kept, so renames need no fixing up.
type fsFile struct {
	p9.DefaultWalkGetAttr
	templatefs.NotLockable
	templatefs.NoopRenamed
	templatefs.XattrUnimplemented

	c    *conn
	fd   int    // O_PATH descriptor of this node
	qid  p9.QID //
	mu   sync.Mutex
	ofd  int         // opened descriptor, -1 until Open/Create; guarded by mu for Readdir
	ents []p9.Dirent // Readdir snapshot, taken when a listing starts at 0; guarded by mu
}

var _ p9.File = (*fsFile)(nil)

func qidOf(st *unix.Stat_t) p9.QID {
	return p9.QID{Type: p9.FileMode(st.Mode).QIDType(), Path: st.Ino}
}

// sysErr turns a syscall error into the errno p9 sends (as linux.Errno,
// so that EPERM is not folded into EACCES on the way).
func sysErr(err error) error {
	if err == nil {
		return nil
	}
	if en, ok := err.(unix.Errno); ok {
		return linux.Errno(en)
	}
	return linux.Errno(msg.Errno(err))
}

func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(fd, "", &st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// newFSRoot opens root as the top of fs/.
func newFSRoot(c *conn, root string) (*fsFile, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, sysErr(err)
	}
	return newFSFile(c, fd)
}

func newFSFile(c *conn, fd int) (*fsFile, error) {
	st, err := fstat(fd)
	if err != nil {
		unix.Close(fd)
		return nil, sysErr(err)
	}
	return &fsFile{c: c, fd: fd, qid: qidOf(&st), ofd: -1}, nil
}

// checkName refuses names that are not one plain path component.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return linux.EINVAL
	}
	return nil
}

// procPath names the node's own inode through its descriptor.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// child opens name in this directory as a new node, without following it.
func (f *fsFile) child(name string) (*fsFile, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(f.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, sysErr(err)
	}
	return newFSFile(f.c, fd)
}

// Walk implements p9.File.Walk.
func (f *fsFile) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		fd, err := unix.FcntlInt(uintptr(f.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, nil, sysErr(err)
		}
		n, err := newFSFile(f.c, fd)
		if err != nil {
			return nil, nil, err
		}
		return nil, n, nil
	}
	var qids []p9.QID
	cur := f
	for i, name := range names {
		n, err := cur.child(name)
		if cur != f {
			cur.Close()
		}
		if err != nil {
			return nil, nil, err
		}
		qids = append(qids, n.qid)
		cur = n
		if i < len(names)-1 && n.qid.Type&p9.TypeDir == 0 {
			n.Close()
			return nil, nil, linux.ENOTDIR
		}
	}
	return qids, cur, nil
}

// StatFS implements p9.File.StatFS.
func (f *fsFile) StatFS() (p9.FSStat, error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(f.fd, &s); err != nil {
		return p9.FSStat{}, sysErr(err)
	}
	return p9.FSStat{
		Type: uint32(s.Type), BlockSize: uint32(s.Bsize), Blocks: s.Blocks, BlocksFree: s.Bfree,
		BlocksAvailable: s.Bavail, Files: s.Files, FilesFree: s.Ffree,
		FSID: uint64(uint32(s.Fsid.Val[0])) | uint64(uint32(s.Fsid.Val[1]))<<32, NameLength: uint32(s.Namelen),
	}, nil
}

// GetAttr implements p9.File.GetAttr.
func (f *fsFile) GetAttr(req p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	st, err := fstat(f.fd)
	if err != nil {
		return p9.QID{}, p9.AttrMask{}, p9.Attr{}, sysErr(err)
	}
	a := p9.Attr{
		Mode: p9.FileMode(st.Mode), UID: p9.UID(st.Uid), GID: p9.GID(st.Gid), NLink: p9.NLink(st.Nlink),
		RDev: p9.Dev(st.Rdev), Size: uint64(st.Size), BlockSize: uint64(st.Blksize), Blocks: uint64(st.Blocks),
		ATimeSeconds: uint64(st.Atim.Sec), ATimeNanoSeconds: uint64(st.Atim.Nsec),
		MTimeSeconds: uint64(st.Mtim.Sec), MTimeNanoSeconds: uint64(st.Mtim.Nsec),
		CTimeSeconds: uint64(st.Ctim.Sec), CTimeNanoSeconds: uint64(st.Ctim.Nsec),
	}
	valid := p9.AttrMask{Mode: true, NLink: true, UID: true, GID: true, RDev: true, ATime: true,
		MTime: true, CTime: true, INo: true, Size: true, Blocks: true}
	qid := qidOf(&st)
	f.setQID(qid)
	return qid, valid, a, nil
}

func (f *fsFile) setQID(q p9.QID) {
	f.mu.Lock()
	f.qid = q
	f.mu.Unlock()
}

func (f *fsFile) getQID() p9.QID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.qid
}

func (f *fsFile) isSymlink() bool { return f.getQID().Type&p9.TypeSymlink != 0 }

// openFD returns the opened descriptor, or -1.
func (f *fsFile) openFD() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ofd
}

// SetAttr implements p9.File.SetAttr.
func (f *fsFile) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	if valid.Permissions {
		if f.isSymlink() {
			return linux.EOPNOTSUPP
		}
		if err := unix.Chmod(procPath(f.fd), uint32(attr.Permissions&0o7777)); err != nil {
			return sysErr(err)
		}
	}
	if valid.UID || valid.GID {
		uid, gid := -1, -1
		if valid.UID {
			uid = int(attr.UID)
		}
		if valid.GID {
			gid = int(attr.GID)
		}
		if err := unix.Fchownat(f.fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return sysErr(err)
		}
	}
	if valid.Size {
		if f.getQID().Type&p9.TypeDir != 0 {
			return linux.EISDIR
		}
		if f.isSymlink() {
			return linux.EINVAL
		}
		ofd := f.openFD()
		var err error
		if ofd >= 0 {
			err = unix.Ftruncate(ofd, int64(attr.Size))
			if err == unix.EBADF || err == unix.EINVAL {
				err = unix.Truncate(procPath(f.fd), int64(attr.Size))
			}
		} else {
			err = unix.Truncate(procPath(f.fd), int64(attr.Size))
		}
		if err != nil {
			return sysErr(err)
		}
	}
	if (valid.ATime || valid.MTime) && !f.isSymlink() {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if valid.ATime {
			ts[0].Nsec = unix.UTIME_NOW
			if valid.ATimeNotSystemTime {
				ts[0] = unix.Timespec{Sec: int64(attr.ATimeSeconds), Nsec: int64(attr.ATimeNanoSeconds)}
			}
		}
		if valid.MTime {
			ts[1].Nsec = unix.UTIME_NOW
			if valid.MTimeNotSystemTime {
				ts[1] = unix.Timespec{Sec: int64(attr.MTimeSeconds), Nsec: int64(attr.MTimeNanoSeconds)}
			}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, procPath(f.fd), ts, 0); err != nil {
			return sysErr(err)
		}
	}
	return nil
}

// Close implements p9.File.Close.
func (f *fsFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ofd >= 0 {
		unix.Close(f.ofd)
		f.ofd = -1
	}
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
	return nil
}

// openFlags keeps the open(2) flags a client may choose.
func openFlags(mode p9.OpenFlags) int {
	return int(mode) & (unix.O_ACCMODE | unix.O_TRUNC | unix.O_APPEND | unix.O_DSYNC | unix.O_SYNC | unix.O_DIRECT | unix.O_NOATIME)
}

// Open implements p9.File.Open. The node's inode is re-opened through
// /proc/self/fd (no path is resolved); symlinks cannot be opened.
func (f *fsFile) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	st, err := fstat(f.fd)
	if err != nil {
		return p9.QID{}, 0, sysErr(err)
	}
	qid := qidOf(&st)
	f.setQID(qid)
	flags := openFlags(mode) | unix.O_CLOEXEC | unix.O_NOCTTY
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return qid, 0, linux.ELOOP
	case unix.S_IFDIR:
		flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	case unix.S_IFIFO:
		flags |= unix.O_NONBLOCK // never block the server in open
	}
	fd, err := unix.Open(procPath(f.fd), flags, 0)
	if err != nil {
		return qid, 0, sysErr(err)
	}
	f.mu.Lock()
	f.ofd = fd
	f.mu.Unlock()
	return qid, 0, nil
}

// ReadAt implements p9.File.ReadAt.
func (f *fsFile) ReadAt(p []byte, off int64) (int, error) {
	ofd := f.openFD()
	if ofd < 0 {
		return 0, linux.EBADF
	}
	n, err := unix.Pread(ofd, p, off)
	if err == unix.ESPIPE {
		n, err = unix.Read(ofd, p)
	}
	if n < 0 {
		n = 0
	}
	return n, sysErr(err)
}

// WriteAt implements p9.File.WriteAt.
func (f *fsFile) WriteAt(p []byte, off int64) (int, error) {
	ofd := f.openFD()
	if ofd < 0 {
		return 0, linux.EBADF
	}
	n, err := unix.Pwrite(ofd, p, off)
	if err == unix.ESPIPE {
		n, err = unix.Write(ofd, p)
	}
	if n < 0 {
		n = 0
	}
	return n, sysErr(err)
}

// FSync implements p9.File.FSync.
func (f *fsFile) FSync() error {
	ofd := f.openFD()
	if ofd < 0 {
		return linux.EBADF
	}
	return sysErr(unix.Fsync(ofd))
}

// Readlink implements p9.File.Readlink.
func (f *fsFile) Readlink() (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(f.fd, "", buf)
	if err != nil {
		return "", sysErr(err)
	}
	return string(buf[:n]), nil
}

// Readdir implements p9.File.Readdir. A listing that starts at offset 0
// reads the whole directory once (getdents64) and later calls page
// through that snapshot; offsets are entry indexes. "." and ".." are left
// out.
func (f *fsFile) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ofd < 0 {
		return nil, linux.EBADF
	}
	if offset == 0 || f.ents == nil {
		ents, err := readDirents(f.ofd)
		if err != nil {
			return nil, sysErr(err)
		}
		f.ents = ents
	}
	if offset >= uint64(len(f.ents)) {
		return nil, nil
	}
	return f.ents[offset:], nil
}

// readDirents lists a directory from the start with getdents64(2).
func readDirents(fd int) ([]p9.Dirent, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	var out []p9.Dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		b := buf[:n]
		for len(b) > 0 {
			// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
			ino := *(*uint64)(unsafe.Pointer(&b[0]))
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			typ := b[18]
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			s := string(name)
			if s == "." || s == ".." {
				continue
			}
			qt := p9.TypeRegular
			switch typ {
			case unix.DT_DIR:
				qt = p9.TypeDir
			case unix.DT_LNK:
				qt = p9.TypeSymlink
			}
			out = append(out, p9.Dirent{QID: p9.QID{Type: qt, Path: ino}, Offset: uint64(len(out) + 1), Type: qt, Name: s})
		}
	}
	if out == nil {
		out = []p9.Dirent{}
	}
	return out, nil
}
