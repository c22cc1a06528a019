package msg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Error is the one error type of sandfs's ctl files: a text for people
// (err files, logs) and the errno the transports carry. Text has the
// shape `verb: reason "input"`, lower case, no final period. Errno
// follows STYLE §3: EINVAL malformed or unknown, EBUSY wrong state,
// ENOENT no such thing, EEXIST exists, E2BIG too big, EPERM not allowed,
// ENOTSUP/ENODEV not supported or not configured, EIO unexpected.
//
// errors.Is(err, syscall.EBUSY) holds for any chain holding an *Error
// with that errno; errors.As(err, &e) finds it. A sentinel *Error matches
// itself with errors.Is, as any pointer does.
type Error struct {
	Errno syscall.Errno
	Text  string
}

// Error returns e.Text.
func (e *Error) Error() string { return e.Text }

// Unwrap returns e.Errno, so errors.Is(err, syscall.EBUSY) works.
func (e *Error) Unwrap() error { return e.Errno }

// Errorf returns an *Error with errno and the formatted text.
func Errorf(errno syscall.Errno, format string, a ...any) *Error {
	return &Error{Errno: errno, Text: fmt.Sprintf(format, a...)}
}

// Prefix returns err as an *Error whose text starts with "verb: " (added
// unless the text already starts so) and whose errno is Errno(err); nil
// for nil. Handlers return bare reasons; the file that ran the verb
// names it once.
func Prefix(verb string, err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if !strings.HasPrefix(text, verb+":") {
		text = verb + ": " + text
	}
	return &Error{Errno: Errno(err), Text: text}
}

// Errno maps any error to the errno a transport returns: 0 for nil; the
// Errno of the first *Error in the chain; else a syscall.Errno in the
// chain; EINTR for context.Canceled; ETIMEDOUT for
// context.DeadlineExceeded; EIO for anything else (callers log those).
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Errno
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	switch {
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return syscall.EIO
}

// CiteMax bounds how much of an offending input an error text repeats.
const CiteMax = 64

// Cite returns s for an error text: quoted with %q and cut to CiteMax
// bytes (then marked "..."), so a text stays one short line whatever the
// input.
func Cite(s string) string {
	if len(s) > CiteMax {
		return fmt.Sprintf("%q...", s[:CiteMax])
	}
	return fmt.Sprintf("%q", s)
}

// Line encodes err for a line protocol (the VMM's control socket): the
// errno's name, a blank, and the error's whole text on one line (newlines
// become blanks):
//
//	EBUSY save: machine is not paused
//
// ParseLine decodes it.
func Line(err error) string {
	text := strings.ReplaceAll(err.Error(), "\n", " ")
	return errnoName(Errno(err)) + " " + text
}

// ParseLine returns the *Error a Line encodes. A line that does not start
// with an errno name (or number) is all text with errno EIO: a peer that
// predates errnos.
func ParseLine(s string) *Error {
	name, text, _ := strings.Cut(s, " ")
	if en, ok := errnoValue(name); ok {
		return &Error{Errno: en, Text: text}
	}
	return &Error{Errno: syscall.EIO, Text: s}
}

// errnoName is e's name (EBUSY), or its number if it has none.
func errnoName(e syscall.Errno) string {
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return strconv.Itoa(int(e))
}

// errnoValue inverts errnoName.
func errnoValue(s string) (syscall.Errno, bool) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 4096 {
		return syscall.Errno(n), true
	}
	en, ok := errnoByName()[s]
	return en, ok
}

// errnoByName maps errno names (EBUSY) to values; ErrnoName has no inverse.
var errnoByName = sync.OnceValue(func() map[string]syscall.Errno {
	m := map[string]syscall.Errno{}
	for e := syscall.Errno(1); e < 4096; e++ {
		if name := unix.ErrnoName(e); name != "" {
			m[name] = e
		}
	}
	return m
})
