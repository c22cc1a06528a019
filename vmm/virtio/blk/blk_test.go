package blk

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sandfs/vmm/virtio/virtiotest"
)

func req(typ uint32, sector uint64) []byte {
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h, typ)
	binary.LittleEndian.PutUint64(h[8:], sector)
	return h
}

type env struct {
	dev  *Device
	d    *virtiotest.Driver
	disk *COW
	base []byte
	path string
}

func newEnv(t *testing.T, cfg Config) *env {
	base, b := makeBase(t, 256*1024)
	disk, err := OpenCOW(base, filepath.Join(t.TempDir(), "o"), COWOptions{NoReflink: true})
	if err != nil {
		t.Fatal(err)
	}
	mem, irq := virtiotest.NewMem(8<<20), virtiotest.NewIRQ()
	dev, err := New(mem, irq, 9, disk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close(); disk.Close() })
	d := virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{})
	return &env{dev, d, disk, b, base}
}

func TestBlockRequests(t *testing.T) {
	e := newEnv(t, Config{ID: "sandfs-test"})
	d := e.d
	if c := binary.LittleEndian.Uint64(d.Config(0, 8)); c != 512 {
		t.Fatalf("capacity = %d sectors, want 512", c)
	}
	if d.Features&(1<<fFlush) == 0 {
		t.Errorf("FLUSH not negotiated: %#x", d.Features)
	}
	// IN: sector 3, 1024 bytes split over two buffers.
	d.AddKick(0, virtiotest.R(req(tIn, 3)), virtiotest.W(512), virtiotest.W(512), virtiotest.W(1))
	u := d.MustWait(0)
	if u.Len != 1025 || !bytes.Equal(u.Out[:1024], e.base[3*512:5*512]) || u.Out[1024] != sOK {
		t.Fatalf("IN: len %d status %d", u.Len, u.Out[len(u.Out)-1])
	}
	// OUT, header and data in one descriptor, then read back.
	data := bytes.Repeat([]byte("sandfs!!"), 128) // 1024
	d.AddKick(0, virtiotest.R(append(req(tOut, 7), data...)), virtiotest.W(1))
	if u := d.MustWait(0); u.Len != 1 || u.Out[0] != sOK {
		t.Fatalf("OUT: %+v", u)
	}
	d.AddKick(0, virtiotest.R(req(tIn, 7)), virtiotest.W(1025))
	if u := d.MustWait(0); !bytes.Equal(u.Out[:1024], data) || u.Out[1024] != sOK {
		t.Fatal("read after write differs")
	}
	// FLUSH, GET_ID, an unknown type.
	d.AddKick(0, virtiotest.R(req(tFlush, 0)), virtiotest.W(1))
	if u := d.MustWait(0); u.Out[0] != sOK {
		t.Fatalf("FLUSH status %d", u.Out[0])
	}
	d.AddKick(0, virtiotest.R(req(tGetID, 0)), virtiotest.W(20), virtiotest.W(1))
	if u := d.MustWait(0); u.Len != 21 || string(bytes.TrimRight(u.Out[:20], "\x00")) != "sandfs-test" || u.Out[20] != sOK {
		t.Fatalf("GET_ID: %q", u.Out)
	}
	d.AddKick(0, virtiotest.R(req(99, 0)), virtiotest.W(1))
	if u := d.MustWait(0); u.Out[0] != sUnsupp {
		t.Fatalf("type 99 status %d, want UNSUPP", u.Out[0])
	}
	// Out of range: the last sector plus one more; nothing is written.
	d.AddKick(0, virtiotest.R(append(req(tOut, 511), make([]byte, 1024)...)), virtiotest.W(1))
	if u := d.MustWait(0); u.Out[0] != sIOErr {
		t.Fatalf("out-of-range OUT status %d, want IOERR", u.Out[0])
	}
	d.AddKick(0, virtiotest.R(req(tIn, 1<<60)), virtiotest.W(513))
	if u := d.MustWait(0); u.All[512] != sIOErr || u.Len != 1 {
		t.Fatalf("huge-sector IN: len %d status %d", u.Len, u.All[512])
	}
	got := make([]byte, 512)
	e.disk.ReadAt(got, 511*512)
	if !bytes.Equal(got, e.base[511*512:]) {
		t.Fatal("out-of-range write changed the last sector")
	}
	// The base image never changes.
	if b, _ := os.ReadFile(e.path); !bytes.Equal(b, e.base) {
		t.Fatal("base image changed")
	}
}

func TestReadOnly(t *testing.T) {
	e := newEnv(t, Config{ReadOnly: true})
	e.d.AddKick(0, virtiotest.R(append(req(tOut, 0), make([]byte, 512)...)), virtiotest.W(1))
	if u := e.d.MustWait(0); u.Out[0] != sIOErr {
		t.Fatalf("OUT on read-only disk: status %d", u.Out[0])
	}
}

func TestSaveRestore(t *testing.T) {
	e := newEnv(t, Config{ID: "x"})
	d := e.d
	d.AddKick(0, virtiotest.R(append(req(tOut, 1), bytes.Repeat([]byte{7}, 512)...)), virtiotest.W(1))
	d.MustWait(0)
	e.dev.Transport().Pause()
	h := d.Add(0, virtiotest.R(req(tIn, 1)), virtiotest.W(513)) // in flight at save
	s := e.dev.Save()
	e.dev.Close()
	b, _ := json.Marshal(s)
	var s2 State
	if err := json.Unmarshal(b, &s2); err != nil {
		t.Fatal(err)
	}
	dev2, _ := New(d.Mem, d.IRQ, 9, e.disk, Config{})
	defer dev2.Close()
	if err := dev2.Restore(s2); err != nil {
		t.Fatal(err)
	}
	d.Dev = dev2.Transport()
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out[:512], bytes.Repeat([]byte{7}, 512)) {
		t.Fatalf("restored IN: %+v", u)
	}
	d.AddKick(0, virtiotest.R(req(tGetID, 0)), virtiotest.W(21))
	if u := d.MustWait(0); u.Out[0] != 'x' {
		t.Fatalf("restored ID %q", u.Out)
	}
}
