package ninep

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// hostFile is a file of the host's file system, opened as a world's
// union opens its files (an FDHandle).
type hostFile struct{ path string }

func (f hostFile) Stat(context.Context) (sfs.Attr, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return sfs.Attr{}, err
	}
	return sfs.Attr{Mode: 0o644, Size: st.Size()}, nil
}

func (f hostFile) Open(_ context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	fd, err := unix.Open(f.path, sfs.HostOpenFlags(flags)|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return sfs.NewFDHandle(fd), nil
}

// unixPair is a connected pair of unix stream sockets.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c.(*net.UnixConn)
		t.Cleanup(func() { cs[i].Close() })
	}
	return cs[0], cs[1]
}

// servePassing serves a directory holding file "f" (data, on the host)
// on a unix socket pair, the server passing reads if pass, and returns
// the client's end, attached, with "f" open read-only as fid 2 (after a
// Tpassreads first if ask).
func servePassing(t *testing.T, data []byte, pass, ask bool) *raw {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := NewServer(oneDir{"f", hostFile{path}}, nil)
	srv.SetIOUnit(0)
	srv.SetPassReads(pass)
	cc, sc := unixPair(t)
	go srv.ServeConn(context.Background(), sc, "")
	r := &raw{t: t, c: cc}
	if ask {
		r.send(msgTpassreads, noTag)
	}
	r.open(512<<10, "f")
	return r
}

// readReply sends a Tread of fid 2 and returns the data its reply
// carries, or that the passed descriptor holds (passed: true).
func readReply(t *testing.T, r *raw, tag uint16, off uint64, count uint32) (data []byte, passed bool) {
	t.Helper()
	r.send(tread, tag, uint32(2), off, count)
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [7]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := r.c.(*net.UnixConn).ReadMsgUnix(hdr[:7], oob)
	if err != nil || n != 7 {
		t.Fatalf("reply header: %d bytes, %v", n, err)
	}
	size, typ := binary.LittleEndian.Uint32(hdr[:]), hdr[4]
	if got := binary.LittleEndian.Uint16(hdr[5:]); got != tag {
		t.Fatalf("reply for tag %d; want %d", got, tag)
	}
	body := make([]byte, size-7)
	if _, err := io.ReadFull(r.c, body); err != nil {
		t.Fatal(err)
	}
	switch typ {
	case tread + 1:
		if oobn != 0 {
			t.Errorf("an Rread came with control data")
		}
		return body[4 : 4+binary.LittleEndian.Uint32(body)], false
	case msgRreadfd:
		fd := oneFD(t, oob[:oobn])
		defer unix.Close(fd)
		if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("passed descriptor open with flags %#x; want read-only", fl)
		}
		poff, pcount := binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint32(body[8:])
		if poff != off || pcount > count {
			t.Fatalf("Rreadfd offset %d count %d for a Tread at %d of %d", poff, pcount, off, count)
		}
		data = make([]byte, pcount)
		n, err := unix.Pread(fd, data, int64(poff))
		if err != nil {
			t.Fatal(err)
		}
		return data[:n], true
	}
	t.Fatalf("reply type %d (body %x)", typ, body[:min(len(body), 16)])
	return nil, false
}

// TestPassedReads: a client that asks gets its large reads of a host
// file as a read-only descriptor with the offset and count to read,
// which hold the file's bytes; small reads, reads near the end and
// clients that did not ask, or whose server does not pass, get the
// data in an Rread, the same bytes.
func TestPassedReads(t *testing.T) {
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	cases := []struct {
		name      string
		pass, ask bool
	}{
		{"asked", true, true},
		{"not asked", true, false},
		{"server does not pass", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := servePassing(t, data, c.pass, c.ask)
			reads := []struct {
				off    uint64
				count  uint32
				passed bool
			}{
				{4096, 300 << 10, c.pass && c.ask},
				{0, 100, false},
				{uint64(len(data)) - 1000, 300 << 10, false}, // 1000 bytes left: under passMin
				{uint64(len(data)) - passMin, 300 << 10, c.pass && c.ask},
				{uint64(len(data)), 300 << 10, false}, // at the end: nothing
			}
			for i, rd := range reads {
				got, passed := readReply(t, r, uint16(10+i), rd.off, rd.count)
				want := data[min(int(rd.off), len(data)):min(int(rd.off)+int(rd.count), len(data))]
				if passed != rd.passed {
					t.Errorf("read %d (%d at %d): passed %v; want %v", i, rd.count, rd.off, passed, rd.passed)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("read %d (%d at %d): %d bytes, not the file's %d", i, rd.count, rd.off, len(got), len(want))
				}
			}
		})
	}
}

// TestPassedReadsOnlyFirst: Tpassreads after the first frame is a
// request p9 does not know, before attach: the connection ends.
func TestPassedReadsOnlyFirst(t *testing.T) {
	srv := NewServer(oneDir{"f", hostFile{"/dev/null"}}, nil)
	srv.SetPassReads(true)
	cc, sc := unixPair(t)
	done := make(chan struct{})
	go func() { srv.ServeConn(context.Background(), sc, ""); close(done) }()
	r := &raw{t: t, c: cc}
	r.send(tver, noTag, uint32(8192), "9P2000.L")
	r.expect(rver, noTag)
	r.send(msgTpassreads, noTag)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("a Tpassreads after Tversion did not end the connection")
	}
	var b [1]byte
	cc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := cc.Read(b[:]); err == nil || err == syscall.EAGAIN {
		t.Errorf("read after the refusal: %v; want the connection's end", err)
	}
}
