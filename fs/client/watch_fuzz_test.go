package client

import (
	"strings"
	"testing"

	"sandfs/ctl/msg"
)

// FuzzParseEvent: any line a guest could send either fails or gives an
// event of a known type whose name stays inside the watched directory,
// and that event written back the agent's way parses to itself.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{"create a.txt", "rename 'a b'", "overflow", "remove 'it''s'", "write sub/../x", "chmod '\n'", "create /x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		ev, err := ParseEvent(line)
		if err != nil {
			return
		}
		named, ok := eventTypes[ev.Type]
		if !ok || named != (ev.Name != "") {
			t.Fatalf("ParseEvent(%q) = %+v: unknown type or name", line, ev)
		}
		for _, c := range strings.Split(ev.Name, "/") {
			if named && (c == ".." || strings.HasPrefix(ev.Name, "/")) {
				t.Fatalf("ParseEvent(%q) = %+v: a name outside the directory", line, ev)
			}
		}
		back := ev.Type
		if named {
			back += " " + msg.Quote(ev.Name)
		}
		if again, err := ParseEvent(back); err != nil || again != ev {
			t.Fatalf("ParseEvent(%q) = %+v; written back %q parses to %+v, %v", line, ev, back, again, err)
		}
		if i := lineEnd([]byte(back + "\n")); i != len(back) {
			t.Fatalf("lineEnd of %q = %d; want %d", back+"\n", i, len(back))
		}
	})
}
