package p9

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/vmm/virtio"
)

// Passed files (the daemon's side: fs/ninep/passfile.go). Every read,
// write and fsync of an open file is a round trip to the server, which
// does a pread, pwrite or fsync on its descriptor of the file. The
// device asks its server, at each session's start, to answer an open or
// create of a plain file with a duplicate of that descriptor (Rlopenfd
// in place of Rlopen or Rlcreate); it then answers the guest's Tread,
// Twrite and Tfsync of that fid itself, on the descriptor, until the
// guest clunks or removes the fid or the session ends. The server keeps
// its own open fid: any request the device does not answer (a getattr,
// a truncate, a lock) goes to it as before, and a file the device cannot
// keep (more than maxPassedFiles) is served by the server alone.
//
//	Tpassfiles: size[4]=7 type[1]=244 tag[2]=NOTAG
//	Rlopenfd:   size[4]=25 type[1]=245 tag[2] rtype[1] qid[13] iounit[4],
//	            and one descriptor (SCM_RIGHTS) with its bytes
//
// rtype is the reply it stands for (Rlopen or Rlcreate); the guest gets
// that reply, qid and iounit. The descriptor's access mode is the
// open's: a read on a file opened for writing fails with EBADF from the
// kernel, as the server's would.
//
// The local requests run where the device takes the guest's chains (the
// vCPU thread's inline path or the device goroutine), in the order the
// guest queued them and under the pause gate, so a snapshot never sees
// a write half made: they are page-cache copies, and an fsync, which
// the guest waits for anyway.
const (
	tTpassfiles = 244
	tRlopenfd   = 245

	tTlopen   = 12
	tRlopen   = 13
	tTlcreate = 14
	tRlcreate = 15
	tTfsync   = 50
	tRfsync   = 51
	tTread    = 116
	tTwrite   = 118
	tRwrite   = 119
	tTremove  = 122

	rlopenfdLen = headerLen + 1 + qidLen + 4
	ioHdrLen    = headerLen + 4 + 8 + 4 // Tread, Twrite: fid[4] offset[8] count[4]
	fsyncLen    = headerLen + 4 + 4     // Tfsync: fid[4] datasync[4]

	// maxPassedFiles bounds the descriptors a session keeps.
	maxPassedFiles = 1024
)

// tpassfiles is the frame that asks for passed files.
var tpassfiles = []byte{7, 0, 0, 0, tTpassfiles, 0xff, 0xff}

// passedFile is an open fid's descriptor. It is closed when the fid is
// dropped and no local request is using it.
type passedFile struct {
	fd   int
	refs int  // local requests using fd; guarded by Device.mu
	gone bool // dropped from Device.files
}

// openFid is the fid of a Tlopen or Tlcreate (frame b): the one that is
// open once it succeeds.
func openFid(h header, b []byte) (uint32, bool) {
	if (h.typ != tTlopen && h.typ != tTlcreate) || len(b) < headerLen+4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[headerLen:]), true
}

// dropClunked forgets the passed file of the fid a Tclunk or Tremove
// (frame b) ends: the guest uses the fid no more.
func (d *Device) dropClunked(h header, b []byte) {
	if (h.typ != tTclunk && h.typ != tTremove) || len(b) < headerLen+4 {
		return
	}
	fid := binary.LittleEndian.Uint32(b[headerLen:])
	d.mu.Lock()
	defer d.mu.Unlock()
	if pf := d.files[fid]; pf != nil {
		delete(d.files, fid)
		pf.dropLocked()
	}
}

// dropFilesLocked forgets every passed file (the session ends). d.mu
// held.
func (d *Device) dropFilesLocked() {
	for fid, pf := range d.files {
		delete(d.files, fid)
		pf.dropLocked()
	}
}

// dropLocked marks pf gone and closes it if no request uses it.
func (pf *passedFile) dropLocked() {
	pf.gone = true
	if pf.refs == 0 {
		unix.Close(pf.fd)
	}
}

// readOpenFD reads the Rlopenfd h (its header checked and buffered in
// br) of session gen, keeps its descriptor for the fid the pending
// request opened, and answers that request with the Rlopen or Rlcreate
// it stands for. A frame without its descriptor, or a malformed one,
// ends the session.
func (d *Device) readOpenFD(q *virtio.Queue, br *bufio.Reader, gen uint64, h header, fds *rightsReader) error {
	b, fd, err := readWithFD(br, h, rlopenfdLen, "Rlopenfd", fds)
	if err != nil {
		return err
	}
	rtype := b[headerLen]
	if rtype != tRlopen && rtype != tRlcreate {
		unix.Close(fd)
		return fmt.Errorf("server Rlopenfd for reply type %d", rtype)
	}
	out := append(replyHeader(rtype, h.tag, qidLen+4), b[headerLen+1:]...)
	if !d.t.Begin() {
		unix.Close(fd)
		return errClosing
	}
	defer d.t.End()
	got := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.pending[h.tag]; ok && r.gen == gen && r.opens && r.c != nil && d.open && d.gen == gen && len(d.files) < maxPassedFiles {
		if old := d.files[r.openFid]; old != nil {
			old.dropLocked()
		}
		d.files[r.openFid] = &passedFile{fd: fd}
		d.stats.passedFiles.Add(1)
	} else {
		unix.Close(fd) // the server answers this fid's requests
	}
	d.replyLocked(q, gen, out, !frameBuffered(br), got)
	return nil
}

// serveLocal answers the guest's Tread, Twrite or Tfsync of c (header h;
// frame b, or its checked header and body in guest memory, direct) on
// the fid's passed file, if it has one, and reports whether it did.
func (d *Device) serveLocal(q *virtio.Queue, c *virtio.Chain, h header, b []byte, direct [][]byte) bool {
	var fixed [ioHdrLen - headerLen]byte // fid and the rest of the fixed part
	switch {
	case h.typ == tTread && h.size == ioHdrLen, h.typ == tTfsync && h.size == fsyncLen:
		if len(b) != int(h.size) {
			return false
		}
		copy(fixed[:], b[headerLen:])
	case h.typ == tTwrite && h.size >= ioHdrLen:
		if b != nil {
			copy(fixed[:], b[headerLen:])
		} else if len(direct) > 0 {
			head, _ := cut(direct[1:], len(fixed))
			if size(head) != len(fixed) {
				return false
			}
			copyBufs(fixed[:], head)
		} else {
			return false
		}
	default:
		return false
	}
	fid := binary.LittleEndian.Uint32(fixed[0:])
	d.mu.Lock()
	pf := d.files[fid]
	if _, dup := d.pending[h.tag]; pf == nil || dup || !d.open {
		d.mu.Unlock()
		return false // to the server, or refused by register
	}
	pf.refs++
	d.mu.Unlock()

	var reply []byte
	pushed := 0 // an Rread's length, its frame written into c already
	switch h.typ {
	case tTread:
		off, count := binary.LittleEndian.Uint64(fixed[4:]), binary.LittleEndian.Uint32(fixed[12:])
		if off > 1<<62 {
			reply = rlerror(h.tag, einval)
			break
		}
		n, err := preadChain(c, pf.fd, int64(off), int(min(count, d.cfg.MaxMsg-rreadHdrLen)), h.tag)
		if errors.Is(err, virtio.ErrBadChain) {
			d.t.Fail(err)
		}
		if err != nil {
			reply = rlerror(h.tag, msg.Errno(err))
			break
		}
		pushed = rreadHdrLen + n
	case tTwrite:
		off, count := binary.LittleEndian.Uint64(fixed[4:]), binary.LittleEndian.Uint32(fixed[12:])
		var data [][]byte
		if b != nil {
			data = [][]byte{b[ioHdrLen:]}
		} else {
			_, data = cut(direct[1:], len(fixed))
		}
		if off > 1<<62 || uint64(count) != uint64(h.size)-ioHdrLen || size(data) != int(count) {
			reply = rlerror(h.tag, einval)
			break
		}
		n, err := pwriteAll(pf.fd, data, int64(off))
		if err != nil && n == 0 {
			reply = rlerror(h.tag, msg.Errno(err))
			break
		}
		reply = binary.LittleEndian.AppendUint32(replyHeader(tRwrite, h.tag, 4), uint32(n))
	case tTfsync:
		var err error
		if binary.LittleEndian.Uint32(fixed[4:]) != 0 {
			err = unix.Fdatasync(pf.fd)
		} else {
			err = unix.Fsync(pf.fd)
		}
		if err != nil {
			reply = rlerror(h.tag, msg.Errno(err))
			break
		}
		reply = replyHeader(tRfsync, h.tag, 0)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if pf.refs--; pf.gone && pf.refs == 0 {
		unix.Close(pf.fd)
	}
	if reply != nil {
		d.writeLocked(q, c, reply)
	} else if !d.t.Failed() {
		q.Push(c.Head, uint32(pushed))
	}
	d.stats.local.Add(1)
	return true
}

// pwriteAll writes bufs at off, all of them unless an error stops it,
// and returns how much it wrote.
func pwriteAll(fd int, bufs [][]byte, off int64) (int, error) {
	n := 0
	for len(bufs) > 0 && size(bufs) > 0 {
		k, err := unix.Pwritev(fd, bufs[:min(len(bufs), maxIov)], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, io.ErrShortWrite
		}
		n += k
		_, bufs = cut(bufs, k)
	}
	return n, nil
}

// maxIov is how many buffers one pwritev takes (the kernel's UIO_MAXIOV).
const maxIov = 1024

// copyBufs copies bufs into p, as much as fits.
func copyBufs(p []byte, bufs [][]byte) {
	for _, b := range bufs {
		p = p[copy(p, b):]
	}
}
