package main

import "testing"

// TestLookupGroup: --group takes a gid or a group name.
func TestLookupGroup(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"4242", 4242, true},
		{"root", 0, true},
		{"no-such-group-sandfs", 0, false},
	} {
		got, err := lookupGroup(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("lookupGroup(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
