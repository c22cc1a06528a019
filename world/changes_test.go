package world

import "testing"

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{
		{"a/b", "", true},
		{"", "", true},
		{"a/b", "a", true},
		{"a/b", "a/b", true},
		{"a/bc", "a/b", false},
		{"a/b", "a/b/c", false},
		{"ab", "a", false},
		{"", "a", false},
	} {
		if got := within(c.path, c.dir); got != c.want {
			t.Errorf("within(%q, %q) = %v, want %v", c.path, c.dir, got, c.want)
		}
	}
}

// TestChangeLogTouches: a change touches its path, what lies under it
// and, recorded with no path, everything; nothing else. A generation
// older than the log, or unknown, is touched.
func TestChangeLogTouches(t *testing.T) {
	c := newChangeLog()
	g := c.load()
	if touched, at := c.touches(g, "a/b"); touched || at != g {
		t.Fatalf("no change: touches = %v, %d; want false, %d", touched, at, g)
	}
	c.record("a/c")     // a sibling
	c.record("a/b/x/y") // below
	if touched, at := c.touches(g, "a/b"); touched || at != g+2 {
		t.Errorf("after a sibling's and a descendant's changes: touches = %v, %d; want false, %d", touched, at, g+2)
	}
	if touched, _ := c.touches(g, "a/c/z"); !touched {
		t.Error("a change of a directory above does not touch the path")
	}
	if touched, _ := c.touches(g+1, "a/c"); touched {
		t.Error("a change before the generation touches the path")
	}
	c.record("d", "a") // a rename: both sides
	if touched, _ := c.touches(g+2, "a/b"); !touched {
		t.Error("a rename of a directory above does not touch the path")
	}
	h := c.load()
	c.record()
	if touched, _ := c.touches(h, "q/r"); !touched {
		t.Error("a change of everything does not touch the path")
	}
	if touched, _ := c.touches(0, "q"); !touched {
		t.Error("an unknown generation is not touched")
	}
	h = c.load()
	for i := 0; i < changeLogSize; i++ {
		c.record("elsewhere")
	}
	if touched, _ := c.touches(h, "q"); !touched {
		t.Error("a generation older than the log is not touched")
	}
	if touched, _ := c.touches(c.load()-changeLogSize+1, "q"); touched {
		t.Error("a generation still in the log, untouched, is touched")
	}
}
