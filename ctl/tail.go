package ctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ReadTail returns the last n bytes of the regular file p: a log or
// console the daemon keeps, in a directory a sandbox's VMM can write, so
// it is opened without following a link and without blocking (a FIFO put
// in its place is refused, not waited on). A missing file is empty.
func ReadTail(p string, n int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	off := max(0, fi.Size()-n)
	return io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
}

// logTail is ReadTail for a log line: the error, if any, as text.
func logTail(p string, max int64) string {
	b, err := ReadTail(p, max)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}
