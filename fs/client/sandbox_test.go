package client

import (
	"maps"
	"testing"

	"sandfs/ctl"
)

// TestNewMessage: every option reaches /ctl's parser as its key, values
// with blanks intact.
func TestNewMessage(t *testing.T) {
	for _, tc := range []struct {
		o    NewOptions
		name string
		keys map[string]string
	}{
		{NewOptions{}, "", map[string]string{}},
		{NewOptions{Name: "a", Template: "base", Mem: "512M", CPUs: 2}, "a",
			map[string]string{"template": "base", "mem": "512M", "cpus": "2"}},
		{NewOptions{From: "s1", World: "w", Group: "lab", Timeout: "5m"}, "",
			map[string]string{"from": "s1", "world": "w", "group": "lab", "timeout": "5m"}},
		{NewOptions{Name: "n", Net: "allow 10.0.0.0/8; deny 10.1.0.0/16"}, "n",
			map[string]string{"net": "allow 10.0.0.0/8; deny 10.1.0.0/16"}},
	} {
		m := tc.o.message()
		c, err := ctl.Parse([]byte(m), ctl.GlobalVerbs)
		if err != nil {
			t.Errorf("%q: %v", m, err)
			continue
		}
		name := ""
		if len(c.Args) > 0 {
			name = c.Args[0]
		}
		if c.Verb != "new" || name != tc.name || !maps.Equal(c.Keys, tc.keys) {
			t.Errorf("%q parsed as %s %q %v; want new %q %v", m, c.Verb, c.Args, c.Keys, tc.name, tc.keys)
		}
	}
}
