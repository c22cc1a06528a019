package guest

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hugelgupf/p9/linux"
)

// Error is the guest agent's error: a text for the err file and the log,
// and the errno the 9P reply carries. Text has the shape
// `verb: reason "input"` (see STYLE §3). The guest does not import package
// ctl (ctl depends on the guest client, not the other way round), so it
// has its own small copy of the type.
type Error struct {
	Errno syscall.Errno
	Text  string
}

func (e *Error) Error() string { return e.Text }

// Unwrap returns the errno, so errors.Is(err, syscall.ENOENT) works.
func (e *Error) Unwrap() error { return e.Errno }

func errorf(errno syscall.Errno, format string, a ...any) *Error {
	return &Error{Errno: errno, Text: fmt.Sprintf(format, a...)}
}

// errnoOf maps an error to the errno for the 9P reply: the Errno of an
// *Error or of a syscall.Errno in the chain, EIO otherwise.
func errnoOf(err error) linux.Errno {
	if err == nil {
		return 0
	}
	var ge *Error
	if errors.As(err, &ge) {
		return linux.Errno(ge.Errno)
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return linux.Errno(en)
	}
	return linux.EIO
}

// quote repeats an offending input in an error text, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
