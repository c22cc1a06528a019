package rng

import (
	"bytes"
	"encoding/json"
	"testing"

	"sandfs/vmm/virtio/virtiotest"
)

func TestFill(t *testing.T) {
	mem, irq := virtiotest.NewMem(4<<20), virtiotest.NewIRQ()
	dev := New(mem, irq, 7)
	defer dev.Close()
	d := virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{})
	if id := d.Reg32(0x008); id != 4 {
		t.Fatalf("DeviceID = %d, want 4", id)
	}
	h := d.AddKick(0, virtiotest.W(16), virtiotest.W(48))
	u := d.MustWait(0)
	if u.ID != h || u.Len != 64 {
		t.Fatalf("used = id %d len %d, want id %d len 64", u.ID, u.Len, h)
	}
	if bytes.Equal(u.Out, make([]byte, 64)) {
		t.Fatal("buffer not filled")
	}
	// A huge buffer gets at most maxPerChain bytes.
	d.AddKick(0, virtiotest.W(maxPerChain+100))
	if u := d.MustWait(0); u.Len != maxPerChain {
		t.Fatalf("len = %d, want %d", u.Len, maxPerChain)
	}
}

func TestSaveRestore(t *testing.T) {
	mem, irq := virtiotest.NewMem(4<<20), virtiotest.NewIRQ()
	dev := New(mem, irq, 7)
	d := virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{})
	d.AddKick(0, virtiotest.W(8))
	d.MustWait(0)
	dev.Transport().Pause()
	s := dev.Save()
	dev.Close()
	b, _ := json.Marshal(s)
	var s2 State
	if err := json.Unmarshal(b, &s2); err != nil {
		t.Fatal(err)
	}
	dev2 := New(mem, irq, 7)
	defer dev2.Close()
	if err := dev2.Restore(s2); err != nil {
		t.Fatal(err)
	}
	d.Dev = dev2.Transport()
	h := d.AddKick(0, virtiotest.W(8))
	if u := d.MustWait(0); u.ID != h || u.Len != 8 {
		t.Fatalf("after restore: %+v", u)
	}
}
