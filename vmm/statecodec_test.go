package vmm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"sandfs/vmm/kvm"
	"sandfs/vmm/serial"
)

// testState is a State with every field set, as a 2-vCPU machine's.
func testState() *State {
	rnd := rand.New(rand.NewSource(1))
	blob := func(n int) []byte {
		b := make([]byte, n)
		rnd.Read(b)
		return b
	}
	st := &State{Version: StateVersion, MemBytes: 256 << 20, CPUs: 2, Cmdline: "console=ttyS0 quiet",
		VM:     VMState{PICMaster: blob(520), PICSlave: blob(520), IOAPIC: blob(520), PIT: blob(112), Clock: 123456789},
		Serial: serial.State{IER: 1, LCR: 3, THREPending: true, RX: []byte("abc"), Level: true},
		Devices: map[string]json.RawMessage{
			"blk0":   json.RawMessage(`{"Queues":[{"Size":128}]}`),
			"vsock0": json.RawMessage(`{"CID":3}`),
		}}
	for id := 0; id < 2; id++ {
		c := VCPUState{ID: id, MPState: uint32(id), XSave: blob(4096), DebugRegs: blob(128), LAPIC: blob(1024), Events: blob(64)}
		for i := 0; i < 256; i++ {
			c.CPUID = append(c.CPUID, kvm.CPUIDEntry{Function: uint32(i), Index: uint32(id), EAX: rnd.Uint32(), EDX: rnd.Uint32()})
		}
		for i := 0; i < 97; i++ {
			c.MSRs = append(c.MSRs, kvm.MSR{Index: uint32(0xc0000080 + i), Data: rnd.Uint64()})
		}
		c.Regs.RIP, c.Regs.RSP, c.Regs.RFLAGS = 0xffffffff81000000, 0xffffc90000003f00, 2
		c.Sregs.CR0, c.Sregs.CR3, c.Sregs.EFER = 0x80050033, 0x1000, 0xd01
		c.Sregs.CS.Selector, c.Sregs.CS.Limit = 0x10, 0xffffffff
		c.XCRs.NrXCRs, c.XCRs.XCRs[0].Value = 1, 7
		st.VCPUs = append(st.VCPUs, c)
	}
	return st
}

func TestStateRoundTrip(t *testing.T) {
	st := testState()
	b, err := EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(stateMagic)) {
		t.Fatalf("encoding starts %q", b[:16])
	}
	got, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("decoded state differs:\n got %+v\nwant %+v", got.VCPUs[1].Sregs, st.VCPUs[1].Sregs)
	}
	again, _ := EncodeState(got)
	if !bytes.Equal(again, b) {
		t.Fatal("encoding the decoded state gives other bytes")
	}
}

// TestStateVersion1 decodes the JSON that snapshots of StateVersion 1
// hold, which a restore must still read.
func TestStateVersion1(t *testing.T) {
	st := testState()
	st.Version = 1
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatal("version 1 state decoded differently")
	}
	st.Version = 2 // JSON was only ever version 1
	b, _ = json.Marshal(st)
	if _, err := DecodeState(b); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("JSON claiming version 2: %v", err)
	}
}

func TestStateDecodeRefuses(t *testing.T) {
	good, err := EncodeState(testState())
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		if _, err := DecodeState(good[:n]); err == nil {
			t.Fatalf("a state cut to %d of %d bytes decoded", n, len(good))
		}
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	// Offsets in the encoding of testState: magic 8, version 4, MemBytes 8,
	// CPUs 4, Cmdline 4+19, four chips 4+520 ×3 and 4+112, Clock 8, then
	// the vCPU count.
	nOff := 8 + 4 + 8 + 4 + 4 + 19 + 3*(4+520) + 4 + 112 + 8
	cpuidOff := nOff + 4 + 4 // count, then vCPU 0's ID, then its CPUID's length
	for name, b := range map[string][]byte{
		"trailing byte": append(append([]byte{}, good...), 0),
		"magic":         edit(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version 3":     edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 3); return b }),
		"version 0":     edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0); return b }),
		"no vCPUs":      edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[nOff:], 0); return b }),
		"vCPUs beyond the machine's maximum": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[nOff:], 1<<30)
			return b
		}),
		"CPUID of part of an entry": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[cpuidOff:], 256*40-1)
			return b
		}),
		"a field longer than the state": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[cpuidOff:], 1<<31)
			return b
		}),
		"empty":    {},
		"bad JSON": []byte(`{"Version":1,`),
	} {
		if _, err := DecodeState(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecodeState(f *testing.F) {
	good, err := EncodeState(testState())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	v1, _ := json.Marshal(&State{Version: 1, CPUs: 1, VCPUs: []VCPUState{{}}})
	f.Add(v1)
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeState(b)
		if err != nil || st.Version != StateVersion {
			return
		}
		again, err := EncodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := DecodeState(again)
		if err != nil || !reflect.DeepEqual(st, st2) {
			t.Fatalf("a decoded state does not survive encoding again: %v", err)
		}
	})
}
