package ninep

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
)

// identity returns who the client on c is, for the access checks of
// every request on it (sfs.Chan):
//
//   - with a token (TCP), root: the token is root's key, and the attach
//     must still name it;
//   - on a unix socket, its peer: the uid and gid it had when it
//     connected (SO_PEERCRED) and its supplementary groups
//     (SO_PEERGROUPS, Linux 4.13; none on an older kernel);
//   - anything else (a pipe handed to ServeConn), nobody.
//
// A Tattach's uname and uid are never asked.
func identity(c net.Conn, token string) (cred.Cred, error) {
	if token != "" {
		return cred.Cred{}, nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return cred.Nobody, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return cred.Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var (
		uc2    *unix.Ucred
		groups []uint32
		serr   error
	)
	if err := raw.Control(func(fd uintptr) {
		if uc2, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); serr == nil {
			groups, serr = peerGroups(int(fd))
		}
	}); err != nil {
		return cred.Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return cred.Cred{}, fmt.Errorf("peer credentials: %w", serr)
	}
	return cred.Cred{UID: uc2.Uid, GID: uc2.Gid, Groups: func() []uint32 { return groups }}, nil
}

// peerGroups returns the supplementary groups of the peer of unix socket
// fd (getsockopt SO_PEERGROUPS, socket(7)); none where the kernel has no
// SO_PEERGROUPS.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == 0:
			return buf[:n/4], nil
		case e == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 1<<16:
			buf = make([]uint32, n/4) // the kernel said how many
		case errors.Is(e, unix.ENOPROTOOPT):
			return nil, nil
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
		}
	}
}
