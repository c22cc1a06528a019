package msg

import (
	"errors"
	"slices"
	"syscall"
	"testing"
)

type state string

type testHandler func(args []string) string

var testTable = Table[testHandler, state]{
	{Name: "delete", Usage: "delete", Run: func([]string) string { return "delete" }},
	{Name: "del", Usage: "del <n>", Min: 1, Max: 1, Run: func([]string) string { return "del" }},
	{Name: "new", Usage: "new [name] [mem=size] [cpus=n]", Max: 1, Keys: []string{"mem", "cpus"}},
	{Name: "env", Usage: "env K=V...", Min: 1, Max: Many},
	{Name: "pause", Usage: "pause", Needs: []state{"running"}},
	{Name: "mem", Usage: "mem <size>", Min: 1, Max: 1, Needs: []state{"new"}, NeedsWhy: "configure before start"},
	{Name: "timeout", Usage: "timeout <dur>", Min: 1, Max: 1, Needs: []state{"new", "creating", "running", "paused"}},
	{Name: "rm", Usage: "rm <id>", Min: 1, Max: 1, Needs: []state{"dead", "new"}},
}

func TestTableParse(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		verb  string
		args  []string
		keys  map[string]string
		errno syscall.Errno
		text  string
	}{
		{name: "whole word", in: "del 3", verb: "del", args: []string{"3"}},
		{name: "longer word", in: "delete", verb: "delete"},
		{name: "prefix", in: "dele", errno: syscall.EINVAL, text: `ctl: unknown verb "dele"`},
		{name: "unknown", in: "bogus x", errno: syscall.EINVAL, text: `ctl: unknown verb "bogus"`},
		{name: "empty", in: "\n", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "missing", in: "del\n", errno: syscall.EINVAL, text: `del: missing argument "del" (usage: del <n>)`},
		{name: "too many", in: "delete now", errno: syscall.EINVAL, text: `delete: too many arguments "delete now" (usage: delete)`},
		{name: "many", in: "env A=1 B=2 C=3", verb: "env", args: []string{"A=1", "B=2", "C=3"}},
		{name: "keys", in: "new box mem=1G cpus=2", verb: "new", args: []string{"box"}, keys: map[string]string{"mem": "1G", "cpus": "2"}},
		{name: "quoted key", in: "new 'mem=1G'", verb: "new", keys: map[string]string{"mem": "1G"}},
		{name: "unknown key", in: "new world=w", errno: syscall.EINVAL, text: `new: unknown key "world=w"`},
		{name: "repeated key", in: "new mem=1G mem=2G", errno: syscall.EINVAL, text: `new: repeated key "mem=2G"`},
		{name: "keys do not count", in: "new a b mem=1G", errno: syscall.EINVAL, text: `new: too many arguments "new a b mem=1G" (usage: new [name] [mem=size] [cpus=n])`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := testTable.Parse(Rules{}, []byte(tt.in))
			if tt.errno != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Errno != tt.errno || e.Text != tt.text {
					t.Fatalf("Parse(%q) = _, %v (%d); want %v %q", tt.in, err, Errno(err), tt.errno, tt.text)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) = _, %v", tt.in, err)
			}
			if c.Verb.Name != tt.verb || !slices.Equal(c.Args, tt.args) || len(c.Keys) != len(tt.keys) {
				t.Fatalf("Parse(%q) = %s %q %v; want %s %q %v", tt.in, c.Verb.Name, c.Args, c.Keys, tt.verb, tt.args, tt.keys)
			}
			for k, v := range tt.keys {
				if c.Keys[k] != v {
					t.Fatalf("Parse(%q) keys = %v; want %v", tt.in, c.Keys, tt.keys)
				}
			}
			if c.Verb.Run != nil && c.Verb.Run(c.Args) != tt.verb {
				t.Fatalf("Parse(%q) ran the handler of another row", tt.in)
			}
		})
	}
}

func TestNeeds(t *testing.T) {
	tests := []struct {
		verb  string
		state state
		ok    bool
		text  string
	}{
		{"delete", "anything", true, ""},
		{"pause", "running", true, ""},
		{"pause", "paused", false, `pause: sandbox "t1" is paused; need running`},
		{"mem", "running", false, `mem: sandbox "t1" is running; need new (configure before start)`},
		{"timeout", "dead", false, `timeout: sandbox "t1" is dead; need new, creating, running or paused`},
		{"rm", "new", true, ""},
		{"rm", "running", false, `rm: sandbox "t1" is running; need dead or new`},
	}
	for _, tt := range tests {
		v := testTable.Lookup(tt.verb)
		if got := v.Allows(tt.state); got != tt.ok {
			t.Errorf("%s.Allows(%s) = %v; want %v", tt.verb, tt.state, got, tt.ok)
		}
		if tt.ok {
			continue
		}
		e := v.Refuse(`sandbox "t1"`, tt.state)
		if e.Errno != syscall.EBUSY || e.Text != tt.text {
			t.Errorf("%s.Refuse(%s) = %v %q; want EBUSY %q", tt.verb, tt.state, e.Errno, e.Text, tt.text)
		}
	}
	if got := testTable.Lookup("delete").Needed(); got != "any state" {
		t.Errorf("Needed() of a stateless verb = %q", got)
	}
}
