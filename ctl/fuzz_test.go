package ctl

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks Parse's contract on any input: no panic; failures are
// *Error with EINVAL or E2BIG; successes name a verb of the table with an
// allowed number of arguments, come from one line of text, and survive
// a round trip through Command.String. Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"new t1 template=base mem=256M cpus=1", "kill t1\n", "template 'it''s'", "cpus 2", "timeout 5m"} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, msg []byte, global bool) {
		tab := SandboxVerbs
		if global {
			tab = GlobalVerbs
		}
		c, err := Parse(msg, tab)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || (ce.Errno != syscall.EINVAL && ce.Errno != syscall.E2BIG) {
				t.Fatalf("Parse(%q) = _, %v (errno %v); want EINVAL or E2BIG *Error", msg, err, Errno(err))
			}
			if len(ce.Text) > 300 || bytes.ContainsAny([]byte(ce.Text), "\n\x00") {
				t.Fatalf("Parse(%q): error text %q is not one short line", msg, ce.Text)
			}
			return
		}
		v := tab.Lookup(c.Verb)
		if v == nil || len(c.Args) < v.Min || len(c.Args) > v.Max {
			t.Fatalf("Parse(%q) = %+v; verb or argument count not allowed by the table", msg, c)
		}
		if len(msg) > MaxMessage || bytes.Count(bytes.TrimSuffix(msg, []byte("\n")), []byte("\n")) != 0 {
			t.Fatalf("Parse(%q) accepted a long or multi-line message", msg)
		}
		back, err := Parse([]byte(c.String()), tab)
		if err != nil {
			t.Fatalf("Parse(%q).String() = %q does not parse: %v", msg, c.String(), err)
		}
		if diff := cmp.Diff(c, back); diff != "" {
			t.Fatalf("round trip of %q through %q (-first +second):\n%s", msg, c.String(), diff)
		}
	})
}

// FuzzSize checks the mem= values: ParseSize never panics or wraps
// around, and FormatSize and ParseSize invert each other.
func FuzzSize(f *testing.F) {
	for _, s := range []string{"256M", "1G", "1536m", "4097K", "0", "18446744073709551615", "16777216T", "17179869184G", "-1M", "+1", "1.5G", "M", ""} {
		f.Add(s, uint64(0))
	}
	f.Add("", uint64(1<<64-1))
	f.Fuzz(func(t *testing.T, s string, n uint64) {
		if v, ok := ParseSize(s); ok {
			if back, ok := ParseSize(FormatSize(v)); !ok || back != v {
				t.Fatalf("ParseSize(%q) = %d; FormatSize gives %q, which parses to %d, %v", s, v, FormatSize(v), back, ok)
			}
		}
		if back, ok := ParseSize(FormatSize(n)); !ok || back != n {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v; want %d", n, FormatSize(n), back, ok, n)
		}
	})
}
