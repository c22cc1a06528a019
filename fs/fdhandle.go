package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Helpers for trees that pass a real file system through (the guest's
// fs/, a world's union): an open file's handle over its descriptor, the
// open(2) flags a client may choose, and a directory listing read with
// getdents64(2).

// HostOpenFlags keeps the open(2) flags a client may choose.
func HostOpenFlags(f OpenFlags) int {
	return int(f) & (unix.O_ACCMODE | unix.O_TRUNC | unix.O_APPEND | unix.O_DSYNC | unix.O_SYNC | unix.O_NOATIME)
}

// FDHandle is an open file of a real file system: its descriptor, which
// it owns and closes.
type FDHandle struct {
	mu sync.RWMutex // Close takes it for writing; the others for reading
	fd int          // -1 once closed; guarded by mu
}

var _ Syncer = (*FDHandle)(nil)

// NewFDHandle returns the handle owning descriptor fd.
func NewFDHandle(fd int) *FDHandle { return &FDHandle{fd: fd} }

// Read implements Handle.Read: pread(2), read(2) where there is no
// offset (a pipe, a device).
func (h *FDHandle) Read(_ context.Context, p []byte, off int64) (int, error) {
	return h.io(p, off, unix.Pread, unix.Read)
}

// Write implements Handle.Write: pwrite(2), or write(2).
func (h *FDHandle) Write(_ context.Context, p []byte, off int64) (int, error) {
	return h.io(p, off, unix.Pwrite, unix.Write)
}

// io runs the positioned call at, or the plain one where the descriptor
// has no offset (ESPIPE), on the open descriptor.
func (h *FDHandle) io(p []byte, off int64, at func(int, []byte, int64) (int, error), plain func(int, []byte) (int, error)) (int, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return 0, syscall.EBADF
	}
	n, err := at(h.fd, p, off)
	if err == unix.ESPIPE {
		n, err = plain(h.fd, p)
	}
	return max(n, 0), err
}

var _ ReadPasser = (*FDHandle)(nil)

// DupReadOnly implements ReadPasser: a duplicate of the descriptor and
// the file's size, if it is open read-only on a regular file.
func (h *FDHandle) DupReadOnly() (int, int64, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return -1, 0, false
	}
	fl, err := unix.FcntlInt(uintptr(h.fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
		return -1, 0, false
	}
	var st unix.Stat_t
	if unix.Fstat(h.fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, 0, false
	}
	fd, err := unix.FcntlInt(uintptr(h.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, 0, false
	}
	return fd, st.Size, true
}

var _ FilePasser = (*FDHandle)(nil)

// DupFile implements FilePasser: a duplicate of the descriptor, if it
// is open on a regular file.
func (h *FDHandle) DupFile() (int, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return -1, false
	}
	var st unix.Stat_t
	if unix.Fstat(h.fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, false
	}
	fd, err := unix.FcntlInt(uintptr(h.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	return fd, true
}

// Sync implements Syncer.
func (h *FDHandle) Sync(context.Context) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return syscall.EBADF
	}
	return unix.Fsync(h.fd)
}

// Close implements Handle.Close.
func (h *FDHandle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

// ReadDirents lists the directory open on fd with getdents64(2), without
// "." and "..", in the order the file system gives.
func ReadDirents(fd int) ([]Dirent, error) {
	out := []Dirent{}
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
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
			ino := *(*uint64)(unsafe.Pointer(&b[0]))
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				return nil, syscall.EIO
			}
			typ, name := b[18], b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if s := string(name); s != "." && s != ".." {
				out = append(out, Dirent{Name: s, Mode: ModeOfUnix(uint32(typ) << 12), Ino: ino})
			}
		}
	}
}
