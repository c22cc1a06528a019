package ninep

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"strings"
	"time"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

// Replies from a 9P server that the daemon does not control (a guest
// agent; the daemon behind ninep.Remote) are input: each count, offset,
// name and text in them is checked before use, and each kind of use is
// bounded. The p9 client (hugelgupf/p9 v0.3.0) checks a reply's framing
// (size at most msize, a count that matches its own payload) but not that
// it answers what was asked:
//
//	Tread  fid off count=32
//	Rread  count=100 data[100]      framed right, 68 bytes too many
//
// Its ReadAt then returns n > len(p) when the surplus stays under one
// chunk (p9/client_file.go, readAt), which makes every caller's p[:n]
// panic, and panics itself ("bytes completed > requested", chunk) when n
// reaches a chunk (msize less the largest fixed header, rounded down to
// 512). An Rwrite's count gets the same treatment in WriteAt. The count
// is only known once the reply is decoded, inside the call, so nothing
// can be checked before it: ReadP9 and WriteP9 wrap the call with recover
// and check n after it. Guard does the same for any other call.
//
// What a reply may not do, and what it gets instead (EIO, text in the
// error, which the guest link records in the sandbox's err):
//
//	Rread/Rwrite count > asked        ErrBadReply "Rread of 100 bytes for a read of 32"
//	a panic in the p9 client          ErrBadReply "panic: ..."
//	readdir offsets that come back    ErrBadReply "readdir offset 7 came back ..."
//	more than MaxDirEntries entries   ErrBadReply "readdir: more than 262144 entries"
//	  or MaxDirBytes bytes of names
//	an entry name with '/' or NUL,    ErrBadReply "readdir: bad entry name ..."
//	  empty, or over NameMax bytes
//
// Texts from a guest that the daemon shows in its own files (err,
// execstatus) go through ctlfs's guestText: one line, control bytes
// escaped.

// ErrBadReply is the error of a 9P reply that breaks the protocol or a
// bound; it is wrapped with what was wrong.
var ErrBadReply = errors.New("bad 9P reply")

// Bounds of one directory listing (ListP9); variables so tests can
// lower them. Every entry counts, "." and ".." too.
var (
	MaxDirEntries = 1 << 18
	MaxDirBytes   = 16 << 20 // bytes of names
)

// NameMax bounds one entry name from a server: NAME_MAX of linux/limits.h.
const NameMax = 255

// Guard runs fn and turns a panic in it into an ErrBadReply error. It is
// for calls into the p9 client that handle a reply (see ReadP9); a panic
// there must not end the daemon.
func Guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: panic: %v", ErrBadReply, r)
		}
	}()
	return fn()
}

// ReadP9 is f.ReadAt(p, off) for a server that may lie: a panic in the
// p9 client becomes ErrBadReply (recover: see the comment at the top of
// this file), and so does a count larger than len(p). On error n is 0.
func ReadP9(f p9.File, p []byte, off int64) (n int, err error) {
	return countedP9("Rread", "read", len(p), func() (int, error) { return f.ReadAt(p, off) })
}

// WriteP9 is f.WriteAt(p, off) for a server that may lie, as ReadP9.
func WriteP9(f p9.File, p []byte, off int64) (n int, err error) {
	return countedP9("Rwrite", "write", len(p), func() (int, error) { return f.WriteAt(p, off) })
}

// countedP9 runs the request io of want bytes under Guard and refuses a
// reply (named reply, of a request named op) that counts more than want.
func countedP9(reply, op string, want int, io func() (int, error)) (n int, err error) {
	err = Guard(func() error {
		var err error
		n, err = io()
		return err
	})
	if n > want || n < 0 {
		return 0, fmt.Errorf("%w: %s of %d bytes for a %s of %d", ErrBadReply, reply, n, op, want)
	}
	if errors.Is(err, ErrBadReply) {
		return 0, err
	}
	return n, err
}

// validName reports whether a server's entry name can be one path
// element here: not empty, no '/' or NUL, at most NameMax bytes.
func validName(s string) bool {
	return s != "" && len(s) <= NameMax && !strings.ContainsAny(s, "/\x00")
}

// FromP9Attr is the Attr of a 9P file with attributes a (a guest's files,
// a remote tree's). A size beyond int64 is cut to the largest int64.
func FromP9Attr(a p9.Attr) sfs.Attr {
	mode := iofs.FileMode(a.Mode.Permissions())
	switch {
	case a.Mode.IsDir():
		mode |= iofs.ModeDir
	case a.Mode.IsSymlink():
		mode |= iofs.ModeSymlink
	}
	size := int64(min(a.Size, math.MaxInt64))
	return sfs.Attr{Mode: mode, Size: size, Mtime: time.Unix(int64(a.MTimeSeconds), int64(a.MTimeNanoSeconds))}
}

// ListP9 reads the whole of the open 9P directory f, count bytes per
// Treaddir, as Dirents without "." and "..". The server's offsets are
// cookies (a guest's ext4 gives hashes), so they are only checked never
// to come back: asking for the same offset twice would repeat forever.
// The listing is bounded by MaxDirEntries and MaxDirBytes, and names must
// be single path elements (validName); breaking any of these is an
// ErrBadReply. Time is the caller's to bound.
func ListP9(f p9.File, count uint32) ([]sfs.Dirent, error) {
	var out []sfs.Dirent
	var off uint64
	entries, bytes := 0, 0
	asked := map[uint64]bool{}
	for {
		if asked[off] {
			return nil, fmt.Errorf("%w: readdir offset %d came back after %d entries", ErrBadReply, off, entries)
		}
		asked[off] = true
		var ds []p9.Dirent
		err := Guard(func() error {
			var err error
			ds, err = f.Readdir(off, count)
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(ds) == 0 {
			return out, nil
		}
		for _, e := range ds {
			entries++
			bytes += len(e.Name)
			if entries > MaxDirEntries {
				return nil, fmt.Errorf("%w: readdir: more than %d entries", ErrBadReply, MaxDirEntries)
			}
			if bytes > MaxDirBytes {
				return nil, fmt.Errorf("%w: readdir: more than %d bytes of names", ErrBadReply, MaxDirBytes)
			}
			off = e.Offset
			if e.Name == "." || e.Name == ".." {
				continue
			}
			if !validName(e.Name) {
				return nil, fmt.Errorf("%w: readdir: bad entry name %.64q", ErrBadReply, e.Name)
			}
			var m iofs.FileMode
			if e.Type == p9.TypeDir {
				m = iofs.ModeDir
			}
			out = append(out, sfs.Dirent{Name: e.Name, Mode: m, Ino: e.QID.Path})
		}
	}
}
