package tailbuf

import "testing"

func TestBufferKeepsTail(t *testing.T) {
	b := &Buffer{Max: 4}
	b.Write([]byte("ab"))
	if got := b.String(); got != "ab" {
		t.Fatalf("String() = %q, want %q", got, "ab")
	}
	b.Write([]byte("cdef"))
	if got := b.String(); got != "cdef" {
		t.Fatalf("String() = %q, want %q", got, "cdef")
	}
	if n, _ := b.Write([]byte("ghijk")); n != 5 {
		t.Fatalf("Write returned %d, want 5", n)
	}
	if got := b.String(); got != "hijk" {
		t.Fatalf("String() = %q, want %q", got, "hijk")
	}
}
