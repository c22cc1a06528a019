package msg

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// FuzzSplit checks Split's contract under both rule sets on any input:
// no panic; a failure is an *Error with EINVAL or E2BIG and a one-line
// text; a success came from at most Max bytes of one line (Text rules:
// valid UTF-8 without control characters but tab; Script rules: several
// lines only inside quotes), holds no NUL, and its words survive a round
// trip through Quote. Seeds are in testdata/fuzz/FuzzSplit.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		"new t1 template=base mem=256M cpus=1", "kill t1\n", "template 'it''s'", "env a'b c'd",
		"exec 'line1\nline2'\n", "start x ''", "  size\t30  100 ", "a\nb", "a 'b", "a \x00",
		"a\r\n", "'\x00'", "\xff", "caf\u00e9 \u0085", "''''", "'",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, m []byte, scripted bool) {
		r := Rules{Max: 512, Script: scripted}
		words, err := r.Split(m)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Errno != syscall.EINVAL && e.Errno != syscall.E2BIG) {
				t.Fatalf("Split(%q) = _, %v (errno %v); want an EINVAL or E2BIG *Error", m, err, Errno(err))
			}
			if len(e.Text) > 300 || strings.ContainsAny(e.Text, "\n\x00") {
				t.Fatalf("Split(%q): error text %q is not one short line", m, e.Text)
			}
			return
		}
		if len(m) > r.Max || len(words) == 0 {
			t.Fatalf("Split(%q) = %q: accepted %d bytes (max %d) or no verb", m, words, len(m), r.Max)
		}
		body := bytes.TrimSuffix(m, []byte("\n"))
		if bytes.IndexByte(m, 0) >= 0 {
			t.Fatalf("Split(%q) = %q: accepted a NUL", m, words)
		}
		if !scripted && !isText(body) {
			t.Fatalf("Split(%q) = %q: Text rules accepted a control character or bad UTF-8", m, words)
		}
		if scripted && bytes.ContainsAny(body, "\n\r") && !bytes.Contains(body, []byte{'\''}) {
			t.Fatalf("Split(%q) = %q: several lines without quotes", m, words)
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = Quote(w)
		}
		again := strings.Join(quoted, " ")
		back, err := Rules{Max: 4 * r.Max, Script: scripted}.Split([]byte(again))
		if err != nil || !slices.Equal(back, words) {
			t.Fatalf("round trip of %q: %q quoted as %q splits to %q, %v", m, words, again, back, err)
		}
	})
}

// isText reports whether b is valid UTF-8 without control characters
// but tab, as Text rules want.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range string(b) {
		if c != '\t' && (c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0) {
			return false
		}
	}
	return true
}
