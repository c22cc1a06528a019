package client

import (
	"errors"
	"syscall"
	"testing"
)

func TestParseEvent(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Event
		err  bool
	}{
		{"create a.txt", Event{"create", "a.txt"}, false},
		{"write sub/b", Event{"write", "sub/b"}, false},
		{"rename 'a b'", Event{"rename", "a b"}, false},
		{"remove 'it''s'", Event{"remove", "it's"}, false},
		{"chmod 'two\nlines'", Event{"chmod", "two\nlines"}, false},
		{"overflow", Event{Type: "overflow"}, false},
		{"overflow x", Event{}, true},
		{"create", Event{}, true},
		{"create a b", Event{}, true},
		{"delete a", Event{}, true},
		{"create /etc/passwd", Event{}, true},
		{"create ../x", Event{}, true},
		{"create a/../../x", Event{}, true},
		{"create ..", Event{}, true},
		{"create ''", Event{}, true},
		{"create 'unterminated", Event{}, true},
		{"", Event{}, true},
		{"create a\x00b", Event{}, true},
	} {
		got, err := ParseEvent(tc.line)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseEvent(%q) = %+v, %v; want %+v, error %v", tc.line, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Errorf("ParseEvent(%q): %v; want EIO", tc.line, err)
		}
	}
}

func TestLineEnd(t *testing.T) {
	for in, want := range map[string]int{
		"":                       -1,
		"create a":               -1,
		"create a\nwrite a\n":    8,
		"create 'a\nb'\nwrite":   12,
		"create 'it''s\n'\n":     15,
		"create 'open\nand more": -1,
	} {
		if got := lineEnd([]byte(in)); got != want {
			t.Errorf("lineEnd(%q) = %d; want %d", in, got, want)
		}
	}
}
