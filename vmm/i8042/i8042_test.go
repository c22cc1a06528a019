package i8042

import "testing"

func TestResetAndStatus(t *testing.T) {
	n := 0
	c := New(func() { n++ })
	b := []byte{0xff}
	c.ReadPIO(4, b)
	if b[0] != 0 {
		t.Errorf("status = %#x; want 0 (kb_wait must not spin)", b[0])
	}
	c.WritePIO(0, []byte{0xfe}) // data port: not a reset
	c.WritePIO(4, []byte{0xd1}) // other command
	if n != 0 {
		t.Fatalf("reset called on a non-reset write")
	}
	c.WritePIO(4, []byte{0xfe})
	c.WritePIO(4, []byte{0xfe})
	if n != 1 {
		t.Errorf("reset called %d times; want 1", n)
	}
}
