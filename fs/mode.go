package fs

import (
	iofs "io/fs"

	"golang.org/x/sys/unix"
)

// ModeOfUnix is the io/fs mode of a stat(2) st_mode (9P2000.L carries
// the same bits).
func ModeOfUnix(m uint32) iofs.FileMode {
	mode := iofs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= iofs.ModeDir
	case unix.S_IFLNK:
		mode |= iofs.ModeSymlink
	case unix.S_IFCHR:
		mode |= iofs.ModeDevice | iofs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= iofs.ModeDevice
	case unix.S_IFIFO:
		mode |= iofs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= iofs.ModeSocket
	}
	if m&unix.S_ISUID != 0 {
		mode |= iofs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= iofs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= iofs.ModeSticky
	}
	return mode
}

// UnixMode is the stat(2) st_mode of an io/fs mode: its file type (a
// regular file when it shows none), permissions and the setuid, setgid
// and sticky bits. The inverse of ModeOfUnix.
func UnixMode(m iofs.FileMode) uint32 {
	u := uint32(m.Perm())
	switch {
	case m.IsDir():
		u |= unix.S_IFDIR
	case m&iofs.ModeSymlink != 0:
		u |= unix.S_IFLNK
	case m&iofs.ModeCharDevice != 0:
		u |= unix.S_IFCHR
	case m&iofs.ModeDevice != 0:
		u |= unix.S_IFBLK
	case m&iofs.ModeNamedPipe != 0:
		u |= unix.S_IFIFO
	case m&iofs.ModeSocket != 0:
		u |= unix.S_IFSOCK
	default:
		u |= unix.S_IFREG
	}
	if m&iofs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&iofs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&iofs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}
