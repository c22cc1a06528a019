package net

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
	"sandfs/vmm/virtio/virtiotest"
)

// fakeTap is a SOCK_SEQPACKET pair: the device gets one end, the test the
// other, and message boundaries are kept as on a tap.
func fakeTap(t *testing.T) (dev, host *os.File) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev, host = os.NewFile(uintptr(fds[0]), "dev"), os.NewFile(uintptr(fds[1]), "host")
	t.Cleanup(func() { dev.Close(); host.Close() })
	return dev, host
}

func frame(payload string) []byte {
	f := make([]byte, VnetHdrLen, VnetHdrLen+14+len(payload))
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5)
	return append(f, payload...)
}

func setup(t *testing.T) (*Device, *virtiotest.Driver, *os.File) {
	tapDev, host := fakeTap(t)
	mem, irq := virtiotest.NewMem(8<<20), virtiotest.NewIRQ()
	dev := New(mem, irq, 10, tapDev, Config{MAC: [6]byte{2, 0, 0, 0, 0, 9}})
	t.Cleanup(func() { dev.Close() })
	return dev, virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{}), host
}

func TestTxRx(t *testing.T) {
	dev, d, host := setup(t)
	if mac := d.Config(0, 6); !bytes.Equal(mac, []byte{2, 0, 0, 0, 0, 9}) {
		t.Errorf("config mac = %x", mac)
	}
	if st := d.Config(6, 2); st[0] != statusLinkUp {
		t.Errorf("config status = %x", st)
	}
	// TX: header and frame in separate descriptors, as Linux may send.
	f := frame("hello from the guest")
	d.AddKick(txQueue, virtiotest.R(f[:VnetHdrLen]), virtiotest.R(f[VnetHdrLen:]))
	if u := d.MustWait(txQueue); u.Len != 0 {
		t.Errorf("tx used len %d, want 0", u.Len)
	}
	host.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 2000)
	n, err := host.Read(got)
	if err != nil || !bytes.Equal(got[:n], f) {
		t.Fatalf("tap got %q, %v; want %q", got[:n], err, f)
	}
	// RX: the frame arrives before any buffer is posted, then gets one.
	in := frame("hello from the host")
	if _, err := host.Write(in); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	d.AddKick(rxQueue, virtiotest.W(1526))
	u := d.MustWait(rxQueue)
	if int(u.Len) != len(in) || !bytes.Equal(u.Out[VnetHdrLen:], in[VnetHdrLen:]) || u.Out[10] != 1 {
		t.Fatalf("rx got %q (len %d)", u.Out, u.Len)
	}
	// Many frames, buffers posted ahead.
	for i := 0; i < 32; i++ {
		d.Add(rxQueue, virtiotest.W(1526))
	}
	d.Kick(rxQueue)
	for i := 0; i < 32; i++ {
		host.Write(frame(string(rune('a' + i%26))))
	}
	for i := 0; i < 32; i++ {
		if u := d.MustWait(rxQueue); u.Out[VnetHdrLen+14] != byte('a'+i%26) {
			t.Fatalf("frame %d out of order: %q", i, u.Out)
		}
	}
	if dev.RxFrames.Load() != 33 || dev.TxFrames.Load() != 1 {
		t.Errorf("counters rx=%d tx=%d", dev.RxFrames.Load(), dev.TxFrames.Load())
	}
}

func TestResetStopsReader(t *testing.T) {
	dev, d, host := setup(t)
	d.SetReg32(0x070, 0) // driver reset: the RX goroutine must exit
	d2 := virtiotest.Init(t, dev.Transport(), d.Mem, d.IRQ, virtiotest.Options{})
	d2.AddKick(rxQueue, virtiotest.W(1526))
	host.Write(frame("after reset"))
	if u := d2.MustWait(rxQueue); !bytes.HasSuffix(u.Out, []byte("after reset")) {
		t.Fatalf("rx after reset: %q", u.Out)
	}
}

func TestBlockingTapReset(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	tapDev, host := os.NewFile(uintptr(fds[0]), "dev"), os.NewFile(uintptr(fds[1]), "host")
	defer tapDev.Close()
	defer host.Close()
	mem, irq := virtiotest.NewMem(8<<20), virtiotest.NewIRQ()
	dev := New(mem, irq, 10, tapDev, Config{})
	d := virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{})
	d.AddKick(rxQueue, virtiotest.W(1526))
	host.Write(frame("x"))
	d.MustWait(rxQueue)
	done := make(chan struct{})
	go func() { dev.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a blocking tap fd")
	}
}

func TestSaveRestore(t *testing.T) {
	dev, d, host := setup(t)
	d.AddKick(rxQueue, virtiotest.W(1526))
	dev.Transport().Pause()
	s := dev.Save()
	dev.Close()
	b, _ := json.Marshal(s)
	var s2 State
	if err := json.Unmarshal(b, &s2); err != nil {
		t.Fatal(err)
	}
	tapDev, host2 := fakeTap(t)
	_ = host
	dev2 := New(d.Mem, d.IRQ, 10, tapDev, Config{})
	defer dev2.Close()
	if err := dev2.Restore(s2); err != nil {
		t.Fatal(err)
	}
	if dev2.MAC() != [6]byte{2, 0, 0, 0, 0, 9} {
		t.Errorf("restored MAC %x", dev2.MAC())
	}
	d.Dev = dev2.Transport()
	host2.Write(frame("restored"))
	if u := d.MustWait(rxQueue); !bytes.HasSuffix(u.Out, []byte("restored")) {
		t.Fatalf("rx after restore: %q", u.Out)
	}
}

func TestOpenTap(t *testing.T) {
	f, name, err := OpenTap("sfstest%d")
	if err != nil {
		testenv.Need(t, false, fmt.Sprintf("no tap here: %v", err))
	}
	defer f.Close()
	t.Logf("opened %s", name)
}

// tcp4 is an IPv4 TCP frame with payload after a vnet header hdr, whose
// TCP checksum field holds the pseudo-header's sum, as a guest leaves it
// with NEEDS_CSUM (csum_start at the TCP header, csum_offset 16).
func tcp4(hdr [VnetHdrLen]byte, payload string) []byte {
	f := append([]byte(nil), hdr[:]...)
	f = append(f, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x08, 0x00) // ethernet
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 2, 198, 51, 100, 1}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+20+len(payload)))
	f = append(f, ip...)
	tcp := []byte{0x9c, 0x40, 0x1f, 0x90, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0}
	seed := fold(sum(ip[12:20]) + 6 + uint64(len(tcp)+len(payload)))
	binary.BigEndian.PutUint16(tcp[16:], seed)
	f = append(f, tcp...)
	return append(f, payload...)
}

// tcpValid reports whether frame f's TCP checksum is right: the sum over
// the pseudo-header and the segment folds to 0xffff.
func tcpValid(f []byte) bool {
	ip := f[VnetHdrLen+14:]
	seg := ip[20:]
	return fold(sum(ip[12:20])+6+uint64(len(seg))+sum(seg)) == 0xffff
}

// TestTxOffload: the guest's single frames with a partial checksum leave
// the VMM checksummed and flagged complete; TCP segments (GSO) pass
// unchanged; headers the guest may not send are dropped.
func TestTxOffload(t *testing.T) {
	dev, d, host := setup(t)
	for _, b := range []uint{fCsum, fHostTSO4, fHostTSO6} {
		if d.Features&(1<<b) == 0 {
			t.Fatalf("feature %d not negotiated (%#x)", b, d.Features)
		}
	}
	read := func() []byte {
		t.Helper()
		host.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 70000)
		n, err := host.Read(got)
		if err != nil {
			t.Fatal(err)
		}
		return got[:n]
	}
	send := func(f []byte) {
		t.Helper()
		d.AddKick(txQueue, virtiotest.R(f[:VnetHdrLen]), virtiotest.R(f[VnetHdrLen:]))
		d.MustWait(txQueue)
	}
	partial := [VnetHdrLen]byte{0: hdrNeedsCsum, 6: 14 + 20, 8: 16}
	for _, payload := range []string{"", "odd", "an even payload!"} {
		f := tcp4(partial, payload)
		if tcpValid(f) {
			t.Fatalf("payload %q: the test's frame is complete already", payload)
		}
		send(f)
		got := read()
		if got[0] != 0 || !tcpValid(got) || !bytes.Equal(got[VnetHdrLen+14+20+20:], []byte(payload)) {
			t.Errorf("payload %q: tap got flags %d, checksum valid %v, frame %x", payload, got[0], tcpValid(got), got)
		}
	}
	seg := [VnetHdrLen]byte{0: hdrNeedsCsum, 1: gsoTCPv4, 2: 54, 4: 0xb4, 5: 0x05, 6: 14 + 20, 8: 16}
	big := tcp4(seg, strings.Repeat("x", 60000))
	send(big)
	if got := read(); !bytes.Equal(got, big) {
		t.Errorf("a GSO frame changed on its way: %d bytes, want %d", len(got), len(big))
	}
	for _, bad := range [][VnetHdrLen]byte{
		{0: hdrNeedsCsum, 6: 14 + 20, 8: 200}, // checksum place past the end
		{0: hdrNeedsCsum, 6: 0xff, 7: 0xff},   // start past the end
		{0: 0x80},                             // a flag not defined for transmit
		{1: 3, 0: hdrNeedsCsum, 6: 34, 8: 6},  // UDP fragmentation (UFO): not offered
		{1: gsoTCPv4},                         // a segment without NEEDS_CSUM
		{1: gsoTCPv4 | 0x80, 0: hdrNeedsCsum}, // ECN: not offered
	} {
		send(tcp4(bad, "dropped"))
	}
	if n := dev.TxDropped.Load(); n != 6 {
		t.Errorf("TxDropped = %d, want 6", n)
	}
	send(frame("still sending"))
	if got := read(); !bytes.HasSuffix(got, []byte("still sending")) {
		t.Errorf("after the drops: %q", got)
	}
}

// TestTxOffloadNotNegotiated: a guest that did not take CSUM or TSO may
// not send their headers.
func TestTxOffloadNotNegotiated(t *testing.T) {
	tapDev, host := fakeTap(t)
	mem, irq := virtiotest.NewMem(8<<20), virtiotest.NewIRQ()
	dev := New(mem, irq, 10, tapDev, Config{})
	t.Cleanup(func() { dev.Close() })
	d := virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{Accept: func(o uint64) uint64 {
		return o &^ (1<<fCsum | 1<<fHostTSO4 | 1<<fHostTSO6 | 1<<29)
	}})
	for _, h := range [][VnetHdrLen]byte{{0: hdrNeedsCsum, 6: 34, 8: 16}, {0: hdrNeedsCsum, 1: gsoTCPv4, 6: 34, 8: 16}} {
		f := tcp4(h, "x")
		d.AddKick(txQueue, virtiotest.R(f))
		d.MustWait(txQueue)
	}
	f := frame("plain")
	d.AddKick(txQueue, virtiotest.R(f))
	d.MustWait(txQueue)
	host.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 2000)
	n, err := host.Read(got)
	if err != nil || !bytes.Equal(got[:n], f) || dev.TxDropped.Load() != 2 {
		t.Errorf("tap got %q, %v, TxDropped %d; want the plain frame only, 2 dropped", got[:n], err, dev.TxDropped.Load())
	}
}
