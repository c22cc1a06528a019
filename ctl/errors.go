package ctl

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Error is the one error type of the control plane: a text for people
// (the err files, the log) and an errno for the transports, which can carry
// nothing else (9P2000.L Rlerror, FUSE replies).
//
// Text has the shape `verb: reason "input"`, lower case, no final period.
// Errno follows the mapping in the package doc: EINVAL malformed or unknown,
// EBUSY wrong state, ENOENT no such sandbox, EEXIST exists, E2BIG too big,
// ENOTSUP/ENODEV not supported (yet) or not configured, EIO unexpected.
type Error struct {
	Errno syscall.Errno
	Text  string
}

// Error returns e.Text.
func (e *Error) Error() string { return e.Text }

// Unwrap returns e.Errno, so errors.Is(err, syscall.EBUSY) works on any
// error chain holding an *Error.
func (e *Error) Unwrap() error { return e.Errno }

// Errorf returns an *Error with the given errno and formatted text.
func Errorf(errno syscall.Errno, format string, a ...any) *Error {
	return &Error{Errno: errno, Text: fmt.Sprintf(format, a...)}
}

// Errno maps any error to the errno a transport should return:
// 0 for nil; the Errno of the first *Error in the chain (errors.As); a
// syscall.Errno in the chain; EINTR for context.Canceled; ETIMEDOUT for
// context.DeadlineExceeded; EIO for anything else.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Errno
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

// quoteMax bounds how much of an offending input an error text repeats.
const quoteMax = 64

// quote returns s quoted with %q, cut to quoteMax bytes (and marked "...")
// so that error texts stay one short line whatever the input.
func quote(s string) string {
	if len(s) > quoteMax {
		return fmt.Sprintf("%q...", s[:quoteMax])
	}
	return fmt.Sprintf("%q", s)
}
