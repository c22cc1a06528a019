package cpio

import (
	"bytes"
	"testing"
)

func TestHeader(t *testing.T) {
	var b bytes.Buffer
	c := NewWriter(&b)
	c.File("init", 0o755, []byte("hello"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := b.Bytes()
	if !bytes.HasPrefix(got, []byte("070701")) || len(got)%4 != 0 {
		t.Fatalf("bad archive start %q len %d", got[:12], len(got))
	}
	if !bytes.Contains(got, []byte("TRAILER!!!\x00")) {
		t.Fatal("no trailer")
	}
}
