package fs

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hugelgupf/p9/p9"
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
// execstatus) go through guestText: one line, control bytes escaped.

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
	err = Guard(func() error {
		var err error
		n, err = f.ReadAt(p, off)
		return err
	})
	if n > len(p) || n < 0 {
		return 0, fmt.Errorf("%w: Rread of %d bytes for a read of %d", ErrBadReply, n, len(p))
	}
	if errors.Is(err, ErrBadReply) {
		return 0, err
	}
	return n, err
}

// WriteP9 is f.WriteAt(p, off) for a server that may lie, as ReadP9.
func WriteP9(f p9.File, p []byte, off int64) (n int, err error) {
	err = Guard(func() error {
		var err error
		n, err = f.WriteAt(p, off)
		return err
	})
	if n > len(p) || n < 0 {
		return 0, fmt.Errorf("%w: Rwrite of %d bytes for a write of %d", ErrBadReply, n, len(p))
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

// guestText turns bytes a guest sent for display in the daemon's own
// files (err, execstatus) into one line: surrounding space trimmed,
// newlines, other control characters and invalid UTF-8 escaped as \xNN,
// so that `cat err` shows text, never terminal escapes or extra lines.
func guestText(b []byte) string {
	b = []byte(strings.TrimSpace(string(b)))
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if (r == utf8.RuneError && size <= 1) || unicode.IsControl(r) {
			for _, c := range b[:max(size, 1)] {
				fmt.Fprintf(&sb, `\x%02x`, c)
			}
		} else {
			sb.Write(b[:size])
		}
		b = b[max(size, 1):]
	}
	return sb.String()
}
