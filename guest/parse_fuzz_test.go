package guest

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"sandfs/ctl/msg"
)

// FuzzParseMessage checks the agent's ctl grammar (rules.Split: package
// msg's tokenizer with the agent's Script rules, used by /ctl and
// procs/<n>/ctl) on any input. Contract: no panic; a failure is a
// *msg.Error with EINVAL or E2BIG and a short one-line text; a success
// came from at most maxMessage bytes, holds no NUL, and survives a round
// trip through msg.Quote (which is how the host builds `start` and `exec`
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
	var me *msg.Error
	if _, err := rules.Split(bytes.Repeat([]byte("x"), maxMessage+1)); !errors.As(err, &me) || me.Errno != syscall.E2BIG {
		f.Fatalf("Split of %d bytes = %v; want E2BIG", maxMessage+1, err)
	}
	f.Fuzz(func(t *testing.T, m []byte) {
		words, err := rules.Split(m)
		if err != nil {
			var me *msg.Error
			if !errors.As(err, &me) || (me.Errno != syscall.EINVAL && me.Errno != syscall.E2BIG) {
				t.Fatalf("Split(%q) = _, %v (errno %v); want an EINVAL or E2BIG *msg.Error", m, err, msg.Errno(err))
			}
			if len(me.Text) > 300 || strings.ContainsAny(me.Text, "\n\x00") {
				t.Fatalf("Split(%q): error text %q is not one short line", m, me.Text)
			}
			return
		}
		if len(m) > maxMessage {
			t.Fatalf("Split accepted %d bytes; max %d", len(m), maxMessage)
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			if strings.IndexByte(w, 0) >= 0 {
				t.Fatalf("Split(%q) = %q: a word holds a NUL", m, words)
			}
			quoted[i] = msg.Quote(w)
		}
		again := strings.Join(quoted, " ")
		back, err := rules.Split([]byte(again))
		if err != nil && len(again) <= maxMessage {
			t.Fatalf("Split(%q) = %q; quoted again %q does not parse: %v", m, words, again, err)
		}
		if err == nil && !reflect.DeepEqual(back, words) {
			t.Fatalf("round trip of %q through %q: %q; want %q", m, again, back, words)
		}
		if bytes.Count(m, []byte{'\n'}) > 1 && !bytes.Contains(m, []byte{'\''}) {
			t.Fatalf("Split(%q) accepted several lines without quotes", m)
		}
	})
}
