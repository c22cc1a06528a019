package vmm

import (
	"encoding/binary"
	"strings"
	"testing"

	"sandfs/vmm/kvm"
)

func TestDescribeInterruptState(t *testing.T) {
	var l kvm.LAPIC
	put := func(off int, v uint32) { binary.LittleEndian.PutUint32(l.Regs[off:], v) }
	put(lapicPPR, 0x30)
	put(lapicISR+16*1, 1<<(0x35-32))   // vector 0x35 in service
	put(lapicIRR+16*1, 1<<(0x36-32))   // 0x36 waits behind it
	put(lapicIRR+16*7, 1<<(0xec-7*32)) // the timer
	got := describeLAPIC(&l)
	for _, want := range []string{"ppr=0x30", "isr=[0x35]", "irr=[0x36 0xec]", "tmr=[]"} {
		if !strings.Contains(got, want) {
			t.Errorf("describeLAPIC = %q; want %q in it", got, want)
		}
	}

	s := make([]byte, 512)
	binary.LittleEndian.PutUint32(s[16:], 1<<6)
	binary.LittleEndian.PutUint64(s[24+8*5:], 0x35)                     // edge
	binary.LittleEndian.PutUint64(s[24+8*6:], 0x36|1<<15|1<<14)         // level, waiting for EOI
	binary.LittleEndian.PutUint64(s[24+8*7:], 0x37|1<<16|uint64(1)<<56) // masked
	got = describeIOAPIC(s)
	for _, want := range []string{"irr=0x40", "pin 5: vector=0x35 edge masked=0 remote_irr=0 dest=0",
		"pin 6: vector=0x36 level masked=0 remote_irr=1", "pin 7: vector=0x37 edge masked=1 remote_irr=0 dest=1"} {
		if !strings.Contains(got, want) {
			t.Errorf("describeIOAPIC = %q; want %q in it", got, want)
		}
	}
	if strings.Contains(got, "pin 0:") {
		t.Errorf("describeIOAPIC lists an unprogrammed pin: %q", got)
	}
}
