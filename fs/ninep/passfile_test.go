package ninep

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openReply reads the reply to an open (tag): its type, body and the
// descriptor that came with it (-1: none).
func openReply(t *testing.T, r *raw, tag uint16) (typ uint8, body []byte, fd int) {
	t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [7]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := r.c.(*net.UnixConn).ReadMsgUnix(hdr[:], oob)
	if err != nil || n != 7 {
		t.Fatalf("reply header: %d bytes, %v", n, err)
	}
	if got := binary.LittleEndian.Uint16(hdr[5:]); got != tag {
		t.Fatalf("reply for tag %d; want %d", got, tag)
	}
	body = make([]byte, binary.LittleEndian.Uint32(hdr[:])-7)
	if _, err := io.ReadFull(r.c, body); err != nil {
		t.Fatal(err)
	}
	fd = -1
	if oobn > 0 {
		fd = oneFD(t, oob[:oobn])
		t.Cleanup(func() { unix.Close(fd) })
	}
	return hdr[4], body, fd
}

// oneFD is the one descriptor control data oob carries.
func oneFD(t *testing.T, oob []byte) int {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control data: %v (%d messages)", err, len(msgs))
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("descriptors: %v %v", fds, err)
	}
	return fds[0]
}

// TestPassedFiles: a client that asks (Tpassfiles) gets its open of a
// host file for writing as Rlopenfd, standing for the Rlopen with the
// server's iounit, with a descriptor of the file open for writing, and
// what it writes there the server reads back on the fid; a client that
// did not ask, or whose server does not pass files, gets the Rlopen and
// no descriptor, with the server's iounit (no cookie leaks out).
func TestPassedFiles(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pass, ask bool
	}{{"passed", true, true}, {"not asked", true, false}, {"not allowed", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
				t.Fatal(err)
			}
			srv := NewServer(oneDir{"f", hostFile{path}}, nil)
			srv.SetIOUnit(0)
			srv.SetPassFiles(tc.pass)
			cc, sc := unixPair(t)
			go srv.ServeConn(context.Background(), sc, "")
			r := &raw{t: t, c: cc}
			if tc.ask {
				r.send(msgTpassfiles, noTag)
			}
			r.attach(64 << 10)
			r.send(twalk, 2, uint32(1), uint32(2), uint16(1), "f")
			r.expect(rwalk, 2)
			r.send(tlopen, 3, uint32(2), uint32(unix.O_RDWR))
			typ, body, fd := openReply(t, r, 3)
			if !tc.pass || !tc.ask {
				if typ != rlopen || fd >= 0 || len(body) != 17 || binary.LittleEndian.Uint32(body[13:]) != 0 {
					t.Fatalf("reply type %d body %x descriptor %d; want an Rlopen of iounit 0 and no descriptor", typ, body, fd)
				}
				return
			}
			if typ != msgRlopenfd || fd < 0 || len(body) != 18 || body[0] != rlopen || binary.LittleEndian.Uint32(body[14:]) != 0 {
				t.Fatalf("reply type %d body %x descriptor %d; want an Rlopenfd for an Rlopen of iounit 0, with a descriptor", typ, body, fd)
			}
			if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_ACCMODE != unix.O_RDWR {
				t.Errorf("passed descriptor has flags %#x; want read-write", fl)
			}
			if _, err := unix.Pwrite(fd, []byte("abc"), 2); err != nil {
				t.Fatal(err)
			}
			data, _ := readReply(t, r, 4, 0, 10)
			if string(data) != "01abc56789" {
				t.Fatalf("the server read %q after the client's write on the passed descriptor", data)
			}
		})
	}
}
