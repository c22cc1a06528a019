package ninep

import (
	iofs "io/fs"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// Attributes between the tree (sfs.Attr, io/fs modes) and 9P2000.L.

// toP9Attr is a node's attributes as a 9P getattr reply, its owner shown
// through ids.
func toP9Attr(a sfs.Attr, ids *IDMap) p9.Attr {
	mode := toP9Mode(a.Mode)
	nlink := p9.NLink(1)
	if a.Mode.IsDir() {
		nlink = 2
	}
	if a.Nlink != 0 {
		nlink = p9.NLink(a.Nlink)
	}
	t := a.Mtime
	if t.IsZero() {
		t = started
	}
	sec, nsec := uint64(t.Unix()), uint64(t.Nanosecond())
	asec, ansec, csec, cnsec := sec, nsec, sec, nsec
	if !a.Atime.IsZero() {
		asec, ansec = uint64(a.Atime.Unix()), uint64(a.Atime.Nanosecond())
	}
	if !a.Ctime.IsZero() {
		csec, cnsec = uint64(a.Ctime.Unix()), uint64(a.Ctime.Nanosecond())
	}
	var o cred.Owner
	if a.Owner != nil {
		o = *a.Owner
	}
	uid, gid := ids.out(o)
	return p9.Attr{
		Mode:         mode,
		UID:          uid,
		GID:          gid,
		NLink:        nlink,
		RDev:         p9.Dev(a.Rdev),
		Size:         uint64(a.Size),
		BlockSize:    4096,
		Blocks:       uint64(a.Blocks),
		ATimeSeconds: asec, ATimeNanoSeconds: ansec,
		MTimeSeconds: sec, MTimeNanoSeconds: nsec,
		CTimeSeconds: csec, CTimeNanoSeconds: cnsec,
	}
}

// toP9Mode is the mode(2) bits of m: its type, permissions and the
// setuid, setgid and sticky bits.
func toP9Mode(m iofs.FileMode) p9.FileMode { return p9.FileMode(sfs.UnixMode(m)) }

// fromP9Mode is the iofs.FileMode of the mode(2) bits m.
func fromP9Mode(m p9.FileMode) iofs.FileMode { return sfs.ModeOfUnix(uint32(m)) }
