package msg

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
)

var script = Rules{Max: 64 << 10, Script: true}

func TestSplit(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		in    string
		want  []string
		errno syscall.Errno
		text  string
	}{
		{name: "verb", in: "pause", want: []string{"pause"}},
		{name: "newline", in: "pause\n", want: []string{"pause"}},
		{name: "blanks", in: "  size\t30  100 ", want: []string{"size", "30", "100"}},
		{name: "quoted", in: "exec 'echo a b'", want: []string{"exec", "echo a b"}},
		{name: "doubled quote", in: "template 'it''s'", want: []string{"template", "it's"}},
		{name: "rc concatenation", in: "env a'b c'd", want: []string{"env", "ab cd"}},
		{name: "empty word", in: "start x ''", want: []string{"start", "x", ""}},
		{name: "only quotes", in: "''''", want: []string{"'"}},
		{name: "utf8", in: "world caf\u00e9", want: []string{"world", "caf\u00e9"}},

		{name: "empty", in: "", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "only newline", in: "\n", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "only blanks", in: " \t ", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "two newlines", in: "pause\n\n", errno: syscall.EINVAL, text: `ctl: more than one line "pause\n"`},
		{name: "second line", in: "pause\nkill\n", errno: syscall.EINVAL, text: `ctl: more than one line "pause\nkill"`},
		{name: "newline in quotes", in: "exec 'a\nb'", errno: syscall.EINVAL, text: `ctl: more than one line "exec 'a\nb'"`},
		{name: "cr", in: "pause\r\n", errno: syscall.EINVAL, text: `ctl: control character in message "pause\r"`},
		{name: "nul", in: "pause\x00", errno: syscall.EINVAL, text: `ctl: control character in message "pause\x00"`},
		{name: "c1 control", in: "a \u0085", errno: syscall.EINVAL},
		{name: "del", in: "a \x7f", errno: syscall.EINVAL},
		{name: "not utf8", in: "a \xff", errno: syscall.EINVAL, text: `ctl: message is not UTF-8 text "a \xff"`},
		{name: "unterminated", in: "template 'base", errno: syscall.EINVAL, text: `ctl: unterminated quote "template 'base"`},
		{name: "lone quote", in: "'", errno: syscall.EINVAL},
		{name: "at max", in: strings.Repeat("x", Max-1) + "\n", want: []string{strings.Repeat("x", Max-1)}},
		{name: "too long", in: strings.Repeat("x", Max+1), errno: syscall.E2BIG, text: "ctl: message too long (4097 bytes, max 4096)"},
		{name: "own max", rules: Rules{Max: 8}, in: "123456789", errno: syscall.E2BIG, text: "ctl: message too long (9 bytes, max 8)"},

		{name: "script newline in quotes", rules: script, in: "exec 'line1\nline2'\n", want: []string{"exec", "line1\nline2"}},
		{name: "script control chars", rules: script, in: "env A=\x1b[0m '\x01\r'", want: []string{"env", "A=\x1b[0m", "\x01\r"}},
		{name: "script not utf8", rules: script, in: "env A=\xff", want: []string{"env", "A=\xff"}},
		{name: "script second line", rules: script, in: "a\nb", errno: syscall.EINVAL, text: `ctl: more than one line "a\nb"`},
		{name: "script cr", rules: script, in: "a\r\n", errno: syscall.EINVAL, text: `ctl: more than one line "a\r"`},
		{name: "script nul", rules: script, in: "a \x00", errno: syscall.EINVAL, text: `ctl: NUL byte in message "a \x00"`},
		{name: "script nul in quotes", rules: script, in: "'\x00'", errno: syscall.EINVAL, text: `ctl: NUL byte in message "'\x00'"`},
		{name: "script unterminated", rules: script, in: "a 'b", errno: syscall.EINVAL, text: `ctl: unterminated quote "a 'b"`},
		{name: "script empty", rules: script, in: "\n", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "script at max", rules: script, in: strings.Repeat("y", 64<<10), want: []string{strings.Repeat("y", 64<<10)}},
		{name: "script too long", rules: script, in: strings.Repeat("y", 64<<10+1), errno: syscall.E2BIG},

		{name: "long input cut", in: "a 'b" + strings.Repeat("c", 100), errno: syscall.EINVAL, text: `ctl: unterminated quote "a 'b` + strings.Repeat("c", CiteMax-4) + `"...`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rules.Split([]byte(tt.in))
			if tt.errno != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Errno != tt.errno {
					t.Fatalf("Split(%q) = %q, %v (%d); want %v", tt.in, got, err, Errno(err), tt.errno)
				}
				if tt.text != "" && e.Text != tt.text {
					t.Fatalf("Split(%q) = _, %q; want %q", tt.in, e.Text, tt.text)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Split(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a", "a"},
		{"", "''"},
		{"a b", "'a b'"},
		{"it's", "'it''s'"},
		{"''", "''''''"},
		{"a\tb", "'a\tb'"},
		{"x\ny", "'x\ny'"},
		{"x\r", "'x\r'"},
		{"x=y", "x=y"},
		{"caf\u00e9", "caf\u00e9"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %q; want %q", tt.in, got, tt.want)
		}
		for _, r := range []Rules{{}, script} {
			if !r.Script && strings.ContainsAny(tt.in, "\n\r") {
				continue // Text rules refuse these, quoted or not
			}
			words, err := r.Split([]byte("v " + Quote(tt.in)))
			if err != nil || len(words) != 2 || words[1] != tt.in {
				t.Errorf("Split(v %s) with %+v = %q, %v; want [v %q]", Quote(tt.in), r, words, err, tt.in)
			}
		}
	}
}
