package net

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
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
