package p9

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sandfs/vmm/virtio/virtiotest"
)

// frame builds a 9P frame of type typ and tag with body.
func frame(typ uint8, tag uint16, body []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(headerLen+len(body)))
	b = append(b, typ)
	b = binary.LittleEndian.AppendUint16(b, tag)
	return append(b, body...)
}

var noTag uint16 = 0xffff

// server is the 9P server end: it accepts the device's sessions.
type server struct {
	t     *testing.T
	conns chan net.Conn
}

// next is the next session's connection.
func (s *server) next() (net.Conn, *bufio.Reader) {
	s.t.Helper()
	select {
	case c := <-s.conns:
		s.t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	case <-time.After(5 * time.Second):
		s.t.Fatal("the device did not dial")
	}
	return nil, nil
}

// recv reads one frame.
func recv(t *testing.T, c net.Conn, br *bufio.Reader) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := readFrame(br, 1<<24)
	if err != nil {
		t.Fatalf("server read: %v", err)
	}
	return b
}

func newDevice(t *testing.T, maxMsg uint32) (*Device, *virtiotest.Driver, *server) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &server{t: t, conns: make(chan net.Conn, 4)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	mem, irq := virtiotest.NewMem(4<<20), virtiotest.NewIRQ()
	dev, err := New(mem, irq, 5, Config{Tag: "sandfs-world", Socket: sock, MaxMsg: maxMsg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev, virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{}), s
}

// wantErrno checks that u is an Rlerror(e) for tag.
func wantErrno(t *testing.T, u virtiotest.Used, tag uint16, e syscall.Errno) {
	t.Helper()
	if want := rlerror(tag, e); !bytes.Equal(u.Out, want) || u.Len != uint32(len(want)) {
		t.Fatalf("reply = %x (len %d), want Rlerror %v tag %d: %x", u.Out, u.Len, e, tag, want)
	}
}

// version opens a session: Tversion, the server's Rversion.
func version(t *testing.T, d *virtiotest.Driver, s *server) (net.Conn, *bufio.Reader) {
	t.Helper()
	return versionAgreeing(t, d, s, false)
}

// versionAgreeing is version, the server agreeing to ordered clunks
// (Rorderclunks, clunk.go) before its Rversion if agree.
func versionAgreeing(t *testing.T, d *virtiotest.Driver, s *server, agree bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	tv := frame(tTversion, noTag, []byte("\x00\x00\x01\x00\x08\x009P2000.L"))
	d.AddKick(0, virtiotest.R(tv), virtiotest.W(64))
	c, br := s.next()
	if got := recv(t, c, br); !bytes.Equal(got, tpassreads) {
		t.Fatalf("server's first frame %x, want Tpassreads %x", got, tpassreads)
	}
	if got := recv(t, c, br); !bytes.Equal(got, torderclunks) {
		t.Fatalf("server's second frame %x, want Torderclunks %x", got, torderclunks)
	}
	if got := recv(t, c, br); !bytes.Equal(got, tpassfiles) {
		t.Fatalf("server's third frame %x, want Tpassfiles %x", got, tpassfiles)
	}
	if got := recv(t, c, br); !bytes.Equal(got, tv) {
		t.Fatalf("server got %x, want %x", got, tv)
	}
	rv := frame(tTversion+1, noTag, []byte("\x00\x00\x01\x00\x08\x009P2000.L"))
	if agree {
		c.Write(frame(tRorderclunks, noTag, nil))
	}
	c.Write(rv)
	if u := d.MustWait(0); !bytes.Equal(u.Out, rv) {
		t.Fatalf("Rversion = %x, want %x", u.Out, rv)
	}
	return c, br
}

func TestMountTag(t *testing.T) {
	_, d, _ := newDevice(t, 0)
	if id := d.Reg32(0x008); id != 9 {
		t.Fatalf("DeviceID = %d, want 9", id)
	}
	if d.Features&(1<<FMountTag) == 0 {
		t.Fatal("MOUNT_TAG not offered")
	}
	if got := d.Config(0, 16); !bytes.Equal(got, []byte("\x0c\x00sandfs-world\x00\x00")) {
		t.Fatalf("config = %q", got)
	}
	if _, err := New(nil, nil, 5, Config{Tag: ""}); err == nil {
		t.Fatal("empty tag accepted")
	}
}

// TestRoundTrip: requests reach the server whole, replies land in the
// chain with their tag, across several writable buffers (the shape of
// Linux's zero-copy reads: an 11-byte header, then the pages).
func TestRoundTrip(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	req := frame(tTread, 3, make([]byte, 16))
	h3 := d.AddKick(0, virtiotest.R(req[:9]), virtiotest.R(req[9:]), virtiotest.W(11), virtiotest.W(4096))
	req4 := frame(tTgetattr, 4, make([]byte, 12))
	h4 := d.AddKick(0, virtiotest.R(req4), virtiotest.W(200))
	got := [][]byte{recv(t, c, br), recv(t, c, br)}
	if !bytes.Equal(got[0], req) || !bytes.Equal(got[1], req4) {
		t.Fatalf("server got %x, want %x and %x", got, req, req4)
	}
	data := bytes.Repeat([]byte("x"), 3000)
	r3 := frame(tRread, 3, append(binary.LittleEndian.AppendUint32(nil, 3000), data...))
	r4 := frame(tRgetattr, 4, make([]byte, 150))
	c.Write(append(r4, r3...)) // out of order
	for range 2 {
		u := d.MustWait(0)
		want := map[uint16][]byte{h3: r3, h4: r4}[u.ID]
		if !bytes.Equal(u.Out, want) || u.Len != uint32(len(want)) {
			t.Fatalf("chain %d: reply %d bytes, want %d", u.ID, u.Len, len(want))
		}
	}
}

// TestRefused: requests the device answers itself; none reaches the
// server (the next frame it reads is the one sent after them).
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		bufs func() []virtiotest.Buf
		tag  uint16
		e    syscall.Errno
	}{
		{"size past the chain", func() []virtiotest.Buf {
			b := frame(tTgetattr, 7, make([]byte, 12))
			binary.LittleEndian.PutUint32(b, 100)
			return []virtiotest.Buf{virtiotest.R(b), virtiotest.W(64)}
		}, 7, syscall.EINVAL},
		{"size below a header", func() []virtiotest.Buf {
			b := frame(tTgetattr, 7, make([]byte, 12))
			binary.LittleEndian.PutUint32(b, 6)
			return []virtiotest.Buf{virtiotest.R(b), virtiotest.W(64)}
		}, 7, syscall.EINVAL},
		{"size past MaxMsg", func() []virtiotest.Buf {
			return []virtiotest.Buf{virtiotest.R(frame(tTgetattr, 7, make([]byte, 5000))), virtiotest.W(64)}
		}, 7, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, d, s := newDevice(t, 4096)
			c, br := version(t, d, s)
			d.AddKick(0, tc.bufs()...)
			wantErrno(t, d.MustWait(0), tc.tag, tc.e)
			next := frame(tTgetattr, 8, make([]byte, 12))
			d.AddKick(0, virtiotest.R(next), virtiotest.W(64))
			if got := recv(t, c, br); !bytes.Equal(got, next) {
				t.Fatalf("server got %x, want only %x", got, next)
			}
		})
	}
}

// TestShortChains: a chain without a header goes back empty; a reply
// larger than the chain's room becomes Rlerror(EMSGSIZE).
func TestShortChains(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	d.AddKick(0, virtiotest.R([]byte{1, 2, 3}), virtiotest.W(64))
	if u := d.MustWait(0); u.Len != 0 {
		t.Fatalf("headerless chain: used len %d, want 0", u.Len)
	}
	d.AddKick(0, virtiotest.R(frame(tTgetattr, 9, nil)), virtiotest.W(20))
	recv(t, c, br)
	c.Write(frame(tRgetattr, 9, make([]byte, 100)))
	wantErrno(t, d.MustWait(0), 9, syscall.EMSGSIZE)
}

// TestDuplicateTag: a tag in flight is refused; the first request still
// gets its own reply.
func TestDuplicateTag(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	first := frame(tTgetattr, 5, []byte("first"))
	h1 := d.AddKick(0, virtiotest.R(first), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, first) {
		t.Fatalf("server got %x", got)
	}
	h2 := d.AddKick(0, virtiotest.R(frame(tTgetattr, 5, []byte("again"))), virtiotest.W(64))
	u := d.MustWait(0)
	if u.ID != h2 {
		t.Fatalf("used %d, want the duplicate %d", u.ID, h2)
	}
	wantErrno(t, u, 5, syscall.EINVAL)
	r := frame(tRgetattr, 5, []byte("reply"))
	c.Write(r)
	if u := d.MustWait(0); u.ID != h1 || !bytes.Equal(u.Out, r) {
		t.Fatalf("used %d %x, want %d %x", u.ID, u.Out, h1, r)
	}
}

// TestNoSession: before a Tversion nothing is dialed and requests get EIO.
func TestNoSession(t *testing.T) {
	_, d, s := newDevice(t, 0)
	d.AddKick(0, virtiotest.R(frame(tTgetattr, 1, nil)), virtiotest.W(64))
	wantErrno(t, d.MustWait(0), 1, syscall.EIO)
	select {
	case <-s.conns:
		t.Fatal("dialed without a Tversion")
	default:
	}
}

// TestSessionEnds: requests in flight when the server goes (or sends a
// bad frame) get EIO, and so do later ones until the next Tversion.
func TestSessionEnds(t *testing.T) {
	for _, bad := range []bool{false, true} {
		_, d, s := newDevice(t, 0)
		c, br := version(t, d, s)
		d.AddKick(0, virtiotest.R(frame(tTgetattr, 2, nil)), virtiotest.W(64))
		recv(t, c, br)
		if bad {
			c.Write([]byte{3, 0, 0, 0})
		} else {
			c.Close()
		}
		wantErrno(t, d.MustWait(0), 2, syscall.EIO)
		d.AddKick(0, virtiotest.R(frame(tTgetattr, 3, nil)), virtiotest.W(64))
		wantErrno(t, d.MustWait(0), 3, syscall.EIO)
		version(t, d, s) // a new session
	}
}

// TestFlush: at Rflush, the flushed request's chain is returned first.
func TestFlush(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	h1 := d.AddKick(0, virtiotest.R(frame(tTread, 1, make([]byte, 16))), virtiotest.W(64))
	recv(t, c, br)
	h2 := d.AddKick(0, virtiotest.R(frame(tTflush, 2, []byte{1, 0})), virtiotest.W(64))
	recv(t, c, br)
	rf := frame(tRflush, 2, nil)
	c.Write(rf)
	u := d.MustWait(0)
	if u.ID != h1 {
		t.Fatalf("first used %d, want the flushed %d", u.ID, h1)
	}
	wantErrno(t, u, 1, syscall.EINTR)
	if u := d.MustWait(0); u.ID != h2 || !bytes.Equal(u.Out, rf) {
		t.Fatalf("used %d %x, want Rflush on %d", u.ID, u.Out, h2)
	}
	if d.Pending(0) != 0 {
		t.Fatalf("%d chains still with the device", d.Pending(0))
	}
}

// TestSaveRestore: a chain in flight at the save is answered EIO by the
// restored device, which then opens a new session.
func TestSaveRestore(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	h := d.AddKick(0, virtiotest.R(frame(tTgetattr, 6, nil)), virtiotest.W(64))
	recv(t, c, br)
	dev.Transport().Pause()
	st := dev.Save()
	dev.Close()
	b, _ := json.Marshal(st)
	var st2 State
	if err := json.Unmarshal(b, &st2); err != nil {
		t.Fatal(err)
	}
	dev2, err := New(d.Mem, d.IRQ, 5, dev.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dev2.Close()
	if err := dev2.Restore(st2); err != nil {
		t.Fatal(err)
	}
	d.Dev = dev2.Transport()
	u := d.MustWait(0)
	if u.ID != h {
		t.Fatalf("used %d, want the held %d", u.ID, h)
	}
	wantErrno(t, u, 6, syscall.EIO)
	version(t, d, s)
}

// TestLarge: frames from directMin on go between guest memory and the
// socket without a buffer: a request split over descriptors reaches the
// server whole (its size as checked), a reply lands across the chain's
// writable buffers, one too large for its chain becomes EMSGSIZE, and a
// session ending inside a large reply answers EIO.
func TestLarge(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	body := bytes.Repeat([]byte("w"), 20000)
	req := frame(tTread+2, 1, body) // a Twrite's size
	d.AddKick(0, virtiotest.R(req[:5]), virtiotest.R(req[5:9000]), virtiotest.R(req[9000:]), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, req) {
		t.Fatalf("server got %d bytes, want the %d of the request", len(got), len(req))
	}
	c.Write(frame(tTread+3, 1, []byte{1, 2, 3, 4}))
	d.MustWait(0)

	h := d.AddKick(0, virtiotest.R(frame(tTread, 2, make([]byte, 16))), virtiotest.W(11), virtiotest.W(9000), virtiotest.W(40000))
	recv(t, c, br)
	data := bytes.Repeat([]byte("r"), 30000)
	r := frame(tRread, 2, append(binary.LittleEndian.AppendUint32(nil, uint32(len(data))), data...))
	c.Write(r)
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out, r) || u.Len != uint32(len(r)) {
		t.Fatalf("used %d len %d, want %d len %d", u.ID, u.Len, h, len(r))
	}
	if n := dev.stats.directReplies.Load(); n != 1 {
		t.Fatalf("%d replies went straight into guest memory; want the 30000-byte one", n)
	}

	d.AddKick(0, virtiotest.R(frame(tTread, 3, make([]byte, 16))), virtiotest.W(11), virtiotest.W(4096))
	recv(t, c, br)
	c.Write(frame(tRread, 3, make([]byte, 20000)))
	wantErrno(t, d.MustWait(0), 3, syscall.EMSGSIZE)

	d.AddKick(0, virtiotest.R(frame(tTread, 4, make([]byte, 16))), virtiotest.W(11), virtiotest.W(40000))
	recv(t, c, br)
	c.Write(frame(tRread, 4, make([]byte, 30000))[:15000])
	c.Close()
	wantErrno(t, d.MustWait(0), 4, syscall.EIO)
}
