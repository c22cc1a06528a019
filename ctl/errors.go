package ctl

import (
	"syscall"

	"sandfs/ctl/msg"
)

// Error is the one error type of the control plane (msg.Error): a text
// for people (the err files, the log) and an errno for the transports,
// which can carry nothing else (9P2000.L Rlerror, FUSE replies).
//
// Text has the shape `verb: reason "input"`, lower case, no final period.
// Errno follows the mapping in the package doc: EINVAL malformed or unknown,
// EBUSY wrong state, ENOENT no such sandbox, EEXIST exists, E2BIG too big,
// ENOTSUP/ENODEV not supported (yet) or not configured, EIO unexpected.
type Error = msg.Error

// Errorf returns an *Error with the given errno and formatted text
// (msg.Errorf).
func Errorf(errno syscall.Errno, format string, a ...any) *Error {
	return msg.Errorf(errno, format, a...)
}

// Errno maps any error to the errno a transport should return
// (msg.Errno): 0 for nil; the Errno of the first *Error in the chain; a
// syscall.Errno in the chain; EINTR for context.Canceled; ETIMEDOUT for
// context.DeadlineExceeded; EIO for anything else.
func Errno(err error) syscall.Errno { return msg.Errno(err) }
