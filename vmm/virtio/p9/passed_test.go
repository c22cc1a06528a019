package p9

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"sandfs/vmm/virtio/virtiotest"
)

// rreadfd is the server's Rreadfd frame for tag: count bytes at off.
func rreadfd(tag uint16, off uint64, count uint32) []byte {
	body := binary.LittleEndian.AppendUint64(nil, off)
	return frame(tRreadfd, tag, binary.LittleEndian.AppendUint32(body, count))
}

// sendFD writes frame b with descriptor fd (SCM_RIGHTS) on c.
func sendFD(t *testing.T, c net.Conn, b []byte, fd int) {
	t.Helper()
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix(b, unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
}

// TestPassedRead: an Rreadfd's data is read from its descriptor into the
// Tread's chain, under an Rread header the device writes (across
// writable buffers of any shape), counted as read: short at the file's
// end, bounded by the chain's room; a read error answers Rlerror; an
// Rreadfd without its descriptor ends the session.
func TestPassedRead(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rread := func(tag uint16, b []byte) []byte {
		return frame(tRread, tag, append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...))
	}
	cases := []struct {
		name  string
		off   uint64
		count uint32
		w     []int // the chain's writable buffers
		want  []byte
	}{
		{"header split, then pages", 4096, 70000, []int{5, 6, 4096, 65904}, data[4096 : 4096+70000]},
		{"short at the end", uint64(len(data)) - 1000, 70000, []int{11, 80000}, data[len(data)-1000:]},
		{"bounded by the room", 0, 70000, []int{11, 30000}, data[:30000]},
	}
	for i, tc := range cases {
		tag := uint16(10 + i)
		ws := []virtiotest.Buf{virtiotest.R(frame(tTread, tag, make([]byte, 16)))}
		for _, n := range tc.w {
			ws = append(ws, virtiotest.W(n))
		}
		h := d.AddKick(0, ws...)
		recv(t, c, br)
		sendFD(t, c, rreadfd(tag, tc.off, tc.count), int(f.Fd()))
		u := d.MustWait(0)
		if want := rread(tag, tc.want); u.ID != h || !bytes.Equal(u.Out, want) || u.Len != uint32(len(want)) {
			t.Errorf("%s: chain %d, reply of %d bytes; want chain %d, an Rread of %d", tc.name, u.ID, u.Len, h, len(want))
		}
	}
	if n := dev.stats.passedReplies.Load(); n != uint64(len(cases)) {
		t.Errorf("%d passed replies counted; want %d", n, len(cases))
	}

	dir, err := os.Open(t.TempDir()) // pread of a directory: EISDIR
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	d.AddKick(0, virtiotest.R(frame(tTread, 20, make([]byte, 16))), virtiotest.W(80000))
	recv(t, c, br)
	sendFD(t, c, rreadfd(20, 0, 70000), int(dir.Fd()))
	wantErrno(t, d.MustWait(0), 20, syscall.EISDIR)

	d.AddKick(0, virtiotest.R(frame(tTread, 21, make([]byte, 16))), virtiotest.W(80000))
	recv(t, c, br)
	c.Write(rreadfd(21, 0, 70000))
	wantErrno(t, d.MustWait(0), 21, syscall.EIO)
}
