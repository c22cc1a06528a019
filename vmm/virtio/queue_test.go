package virtio

import (
	"math/rand/v2"
	"testing"

	"sandfs/vmm/bus"
)

type flatMem []byte

func (m flatMem) Slice(gpa uint64, n int) ([]byte, error) {
	if n < 0 || gpa > uint64(len(m)) || uint64(n) > uint64(len(m))-gpa {
		return nil, errOutside
	}
	return m[gpa : gpa+uint64(n)], nil
}

var errOutside = ErrBadChain

var _ bus.Memory = flatMem(nil)

// TestRandomRings walks garbage descriptor tables: Pop must return chains
// or errors, never panic or loop, and a chain's buffers must be RAM.
func TestRandomRings(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		mem := make(flatMem, 1<<16)
		for i := range mem {
			mem[i] = byte(r.Uint32())
		}
		// Small addresses and lengths so chains sometimes make sense.
		for i := 0; i < 64; i++ {
			d := mem[0x1000+16*i:]
			d[1], d[2], d[3], d[4], d[5], d[6], d[7] = 0, 0, 0, 0, 0, 0, 0
			d[9], d[10], d[11] = byte(r.IntN(2)), 0, 0
			d[12] &= 7
			d[13] = 0
			d[14] &= 63
			d[15] = 0
		}
		q := &Queue{Max: 64, Size: 64, Ready: true, DescAddr: 0x1000, DriverAddr: 0x2000, DeviceAddr: 0x3000}
		if err := q.activate(mem, Bit(FRingIndirectDesc)|Bit(FRingEventIdx)); err != nil {
			t.Fatal(err)
		}
		for range 70 {
			c, ok, err := q.Pop()
			if err != nil || !ok {
				break
			}
			if _, err := c.Buffers(false); err != nil {
				continue
			}
			buf := make([]byte, 128)
			c.Read(buf)
			c.Write(buf)
			q.Push(c.Head, c.Written())
			q.NeedInterrupt()
		}
	}
}
