package guest

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// FuzzParseMessage checks the agent's ctl grammar (parseMessage, used by
// /ctl and procs/<n>/ctl) on any input. Contract: no panic; a failure is
// an *Error with EINVAL or E2BIG and a short one-line text; a success
// came from at most maxMessage bytes, holds no NUL, and survives a round
// trip through Quote (which is how the host builds `start` and `exec`
// messages). Seeds are in testdata/fuzz/FuzzParseMessage.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{
		"start ls -l\n", "exec 'echo a b'", "exec 'it''s'", "env a'b c'd",
		"exec 'line1\nline2'\n", "start x ''", "  size\t30  100 ", "a\nb", "a 'b", "a \x00",
		"env FOO='a b' BAR=1", "signal TERM", "user tuser", "cwd '/tmp/x y'",
		"a\r\n", "'\x00'",
	} {
		f.Add([]byte(s))
	}
	// Too long: checked once here; 64 KiB seeds slow the fuzzer to a halt.
	var ge *Error
	if _, err := parseMessage(bytes.Repeat([]byte("x"), maxMessage+1)); !errors.As(err, &ge) || ge.Errno != syscall.E2BIG {
		f.Fatalf("parseMessage of %d bytes = %v; want E2BIG", maxMessage+1, err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := parseMessage(msg)
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) || (ge.Errno != syscall.EINVAL && ge.Errno != syscall.E2BIG) {
				t.Fatalf("parseMessage(%q) = _, %v (errno %v); want an EINVAL or E2BIG *Error", msg, err, errnoOf(err))
			}
			if len(ge.Text) > 300 || strings.ContainsAny(ge.Text, "\n\x00") {
				t.Fatalf("parseMessage(%q): error text %q is not one short line", msg, ge.Text)
			}
			return
		}
		if len(msg) > maxMessage {
			t.Fatalf("parseMessage accepted %d bytes; max %d", len(msg), maxMessage)
		}
		words := append([]string{c.verb}, c.args...)
		quoted := make([]string, len(words))
		for i, w := range words {
			if strings.IndexByte(w, 0) >= 0 {
				t.Fatalf("parseMessage(%q) = %q: a word holds a NUL", msg, words)
			}
			quoted[i] = Quote(w)
		}
		again := strings.Join(quoted, " ")
		back, err := parseMessage([]byte(again))
		if err != nil && len(again) <= maxMessage {
			t.Fatalf("parseMessage(%q) = %q; quoted again %q does not parse: %v", msg, words, again, err)
		}
		if err == nil && !reflect.DeepEqual(append([]string{back.verb}, back.args...), words) {
			t.Fatalf("round trip of %q through %q: %q; want %q", msg, again, append([]string{back.verb}, back.args...), words)
		}
		if bytes.Count(msg, []byte{'\n'}) > 1 && !bytes.Contains(msg, []byte{'\''}) {
			t.Fatalf("parseMessage(%q) accepted several lines without quotes", msg)
		}
	})
}
