package msg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
)

func TestErrno(t *testing.T) {
	busy := Errorf(syscall.EBUSY, "pause: busy")
	tests := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"error", busy, syscall.EBUSY},
		{"wrapped error", fmt.Errorf("ctx: %w", busy), syscall.EBUSY},
		{"outermost error wins", Errorf(syscall.ENOENT, "a: %v", fmt.Errorf("%w", busy)), syscall.ENOENT},
		{"syscall errno", fmt.Errorf("open: %w", syscall.EACCES), syscall.EACCES},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), syscall.EINTR},
		{"deadline", context.DeadlineExceeded, syscall.ETIMEDOUT},
		{"other", io.ErrUnexpectedEOF, syscall.EIO},
	}
	for _, tt := range tests {
		if got := Errno(tt.err); got != tt.want {
			t.Errorf("%s: Errno(%v) = %v; want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestErrorIsAs(t *testing.T) {
	sentinel := Errorf(syscall.EBUSY, "machine is not paused")
	err := fmt.Errorf("save: %w", sentinel)
	if !errors.Is(err, syscall.EBUSY) {
		t.Errorf("errors.Is(%v, EBUSY) = false", err)
	}
	if errors.Is(err, syscall.ENOENT) {
		t.Errorf("errors.Is(%v, ENOENT) = true", err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, sentinel) = false", err)
	}
	var e *Error
	if !errors.As(err, &e) || e != sentinel {
		t.Errorf("errors.As(%v) = %v; want the sentinel", err, e)
	}
	if err.Error() != "save: machine is not paused" {
		t.Errorf("text = %q", err.Error())
	}
}

func TestCite(t *testing.T) {
	tests := []struct{ in, want string }{
		{"bogus", `"bogus"`},
		{"a\nb", `"a\nb"`},
		{"", `""`},
		{strings.Repeat("x", CiteMax), `"` + strings.Repeat("x", CiteMax) + `"`},
		{strings.Repeat("x", CiteMax+1), `"` + strings.Repeat("x", CiteMax) + `"...`},
	}
	for _, tt := range tests {
		if got := Cite(tt.in); got != tt.want {
			t.Errorf("Cite(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}

func TestLine(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		line  string
		errno syscall.Errno
		text  string
	}{
		{"error", Errorf(syscall.EBUSY, "save: machine is not paused"), "EBUSY save: machine is not paused", syscall.EBUSY, "save: machine is not paused"},
		{"wrapped", fmt.Errorf("save: %w", Errorf(syscall.EBUSY, "machine is not paused")), "EBUSY save: machine is not paused", syscall.EBUSY, "save: machine is not paused"},
		{"plain", errors.New("pause: not started"), "EIO pause: not started", syscall.EIO, "pause: not started"},
		{"two lines", errors.New("a: b\nc"), "EIO a: b c", syscall.EIO, "a: b c"},
		{"syscall", fmt.Errorf("save: %w", syscall.ENOSPC), "ENOSPC save: no space left on device", syscall.ENOSPC, "save: no space left on device"},
		{"nameless errno", Errorf(syscall.Errno(4000), "x: y"), "4000 x: y", syscall.Errno(4000), "x: y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := Line(tt.err)
			if line != tt.line {
				t.Fatalf("Line(%v) = %q; want %q", tt.err, line, tt.line)
			}
			e := ParseLine(line)
			if e.Errno != tt.errno || e.Text != tt.text {
				t.Fatalf("ParseLine(%q) = %d %q; want %d %q", line, e.Errno, e.Text, tt.errno, tt.text)
			}
		})
	}
	// A peer from before errnos sends only the text.
	if e := ParseLine("pause: not started"); e.Errno != syscall.EIO || e.Text != "pause: not started" {
		t.Errorf("ParseLine(old reply) = %d %q; want EIO and the whole text", e.Errno, e.Text)
	}
}

func TestPrefix(t *testing.T) {
	if Prefix("x", nil) != nil {
		t.Error("Prefix of nil is not nil")
	}
	for _, c := range []struct {
		err   error
		errno syscall.Errno
		text  string
	}{
		{syscall.EPERM, syscall.EPERM, "time: operation not permitted"},
		{Errorf(syscall.EINVAL, "bad %s", Cite("y")), syscall.EINVAL, `time: bad "y"`},
		{Errorf(syscall.EBUSY, "time: already"), syscall.EBUSY, "time: already"}, // not doubled
		{errors.New("odd"), syscall.EIO, "time: odd"},
	} {
		var e *Error
		if err := Prefix("time", c.err); !errors.As(err, &e) || e.Errno != c.errno || e.Text != c.text {
			t.Errorf("Prefix(time, %v) = %#v; want %v %q", c.err, err, c.errno, c.text)
		}
	}
}
