package vsock

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sandfs/vmm/virtio/virtiotest"
)

// guest plays the guest's virtio-vsock driver and one socket layer: it
// keeps RX buffers posted, and tracks credit for each connection.
type guest struct {
	t   *testing.T
	d   *virtiotest.Driver
	dev *Device
	got []pkt // packets received, not yet consumed by the test
}

type pkt struct {
	hdr
	data []byte
}

const guestBufAlloc = 64 << 10

func newGuest(t *testing.T) *guest {
	uds := filepath.Join(t.TempDir(), "v.sock")
	mem, irq := virtiotest.NewMem(32<<20), virtiotest.NewIRQ()
	dev, err := New(mem, irq, 11, Config{UDS: uds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	g := &guest{t: t, dev: dev, d: virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{QueueSize: 64})}
	if cid := g.d.Config(0, 8); cid[0] != 3 {
		t.Fatalf("guest_cid = %x", cid)
	}
	g.post(32)
	return g
}

func (g *guest) post(n int) {
	for range n {
		g.d.Add(rxQueue, virtiotest.W(hdrLen+4096))
	}
	g.d.Kick(rxQueue)
}

func (g *guest) send(op uint16, gport, hport uint32, flags uint32, fwd uint32, data []byte) {
	h := hdr{SrcCID: 3, DstCID: HostCID, SrcPort: gport, DstPort: hport, Len: uint32(len(data)),
		Type: typeStream, Op: op, Flags: flags, BufAlloc: guestBufAlloc, FwdCnt: fwd}
	b := make([]byte, hdrLen)
	h.encode(b)
	if len(data) > 0 {
		g.d.AddKick(txQueue, virtiotest.R(b), virtiotest.R(data))
	} else {
		g.d.AddKick(txQueue, virtiotest.R(b))
	}
	// Reclaim tx descriptors as they complete.
	for {
		if _, ok := g.d.Poll(txQueue); !ok {
			break
		}
	}
	for g.d.Pending(txQueue) > 16 {
		g.d.Wait(txQueue, time.Second)
	}
}

// recv returns the next packet from the device.
func (g *guest) recv() pkt {
	g.t.Helper()
	u := g.d.MustWait(rxQueue)
	g.post(1)
	var p pkt
	p.decode(u.Out)
	p.data = u.Out[hdrLen:]
	if int(p.Len) != len(p.data) {
		g.t.Fatalf("packet len %d, payload %d", p.Len, len(p.data))
	}
	return p
}

func (g *guest) expect(op uint16) pkt {
	g.t.Helper()
	p := g.recv()
	if p.Op != op {
		g.t.Fatalf("got op %d (%+v), want %d", p.Op, p.hdr, op)
	}
	if p.SrcCID != HostCID || p.DstCID != 3 || p.Type != typeStream {
		g.t.Fatalf("bad addressing %+v", p.hdr)
	}
	return p
}

func TestGuestToHost(t *testing.T) {
	g := newGuest(t)
	ln, err := net.Listen("unix", g.dev.uds+"_1234")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.send(opRequest, 5000, 1234, 0, 0, nil)
	r := g.expect(opResponse)
	if r.SrcPort != 1234 || r.DstPort != 5000 || r.BufAlloc != bufAlloc {
		t.Fatalf("response %+v", r.hdr)
	}
	hc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	g.send(opRW, 5000, 1234, 0, 0, []byte("hello host"))
	buf := make([]byte, 64)
	n, err := hc.Read(buf)
	if err != nil || string(buf[:n]) != "hello host" {
		t.Fatalf("host read %q, %v", buf[:n], err)
	}
	hc.Write([]byte("hello guest"))
	if p := g.expect(opRW); string(p.data) != "hello guest" {
		t.Fatalf("guest read %q", p.data)
	}
	// Guest closes: SHUTDOWN both; host sees EOF; guest gets RST.
	g.send(opShutdown, 5000, 1234, shutRcv|shutSend, 11, nil)
	hc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := hc.Read(buf); err != io.EOF {
		t.Fatalf("host read after guest shutdown: %d, %v", n, err)
	}
	g.expect(opRST)
}

func TestGuestConnectRefused(t *testing.T) {
	g := newGuest(t)
	g.send(opRequest, 5001, 999, 0, 0, nil)
	if p := g.expect(opRST); p.SrcPort != 999 || p.DstPort != 5001 {
		t.Fatalf("rst %+v", p.hdr)
	}
	// Data for an unknown connection is answered with RST too.
	g.send(opRW, 5002, 998, 0, 0, []byte("x"))
	g.expect(opRST)
}

func TestHostToGuest(t *testing.T) {
	g := newGuest(t)
	hc, err := net.Dial("unix", g.dev.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	fmt.Fprintf(hc, "CONNECT 52\n")
	req := g.expect(opRequest)
	if req.DstPort != 52 || req.SrcPort < firstLocalPort {
		t.Fatalf("request %+v", req.hdr)
	}
	g.send(opResponse, 52, req.SrcPort, 0, 0, nil)
	br := bufio.NewReader(hc)
	line, err := br.ReadString('\n')
	if err != nil || line != fmt.Sprintf("OK %d\n", req.SrcPort) {
		t.Fatalf("host got %q, %v", line, err)
	}
	hc.Write([]byte("ping"))
	if p := g.expect(opRW); string(p.data) != "ping" {
		t.Fatalf("guest got %q", p.data)
	}
	g.send(opRW, 52, req.SrcPort, 0, 4, []byte("pong"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "pong" {
		t.Fatalf("host got %q, %v", b, err)
	}
	// A second client the guest refuses.
	hc2, _ := net.Dial("unix", g.dev.uds)
	defer hc2.Close()
	fmt.Fprintf(hc2, "CONNECT 53\n")
	req2 := g.expect(opRequest)
	g.send(opRST, 53, req2.SrcPort, 0, 0, nil)
	hc2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := hc2.Read(b); err != io.EOF {
		t.Fatalf("refused client read %d, %v; want EOF", n, err)
	}
	// A malformed CONNECT line is dropped.
	hc3, _ := net.Dial("unix", g.dev.uds)
	defer hc3.Close()
	fmt.Fprintf(hc3, "HELLO 1\n")
	hc3.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := hc3.Read(b); err != io.EOF {
		t.Fatalf("bad line: read %v, want EOF", err)
	}
}

// TestBulk pushes data both ways through one host-initiated connection,
// with the guest honouring and granting credit like Linux does.
func TestBulk(t *testing.T) {
	const size = 3 << 20
	g := newGuest(t)
	hc, err := net.Dial("unix", g.dev.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	fmt.Fprintf(hc, "CONNECT 7\n")
	req := g.expect(opRequest)
	hp := req.SrcPort
	g.send(opResponse, 7, hp, 0, 0, nil)
	br := bufio.NewReader(hc)
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "OK ") {
		t.Fatalf("host got %q", line)
	}
	up := make([]byte, size) // host → guest
	down := make([]byte, size)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range up {
		up[i], down[i] = byte(r.Uint32()), byte(r.Uint32())
	}
	go func() {
		hc.Write(up)
		hc.(*net.UnixConn).CloseWrite()
	}()
	hostGot := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(br)
		hostGot <- b
	}()
	// Guest loop: receive everything, grant credit as it "reads", and
	// send its own data within the host's credit.
	var recv []byte
	var fwd uint32 // what the guest consumed
	var sent int   // bytes of down sent
	var hostBuf, hostFwd uint32 = bufAlloc, 0
	eof := false
	for !eof || sent < size {
		for sent < size {
			credit := hostBuf - (uint32(sent) - hostFwd)
			n := min(size-sent, 4096, int(credit))
			if n <= 0 {
				break
			}
			g.send(opRW, 7, hp, 0, fwd, down[sent:sent+n])
			sent += n
		}
		if eof && sent == size {
			break // nothing more to wait for: the host's fwd_cnt of the last bytes may come with no packet of its own
		}
		u, ok := g.d.Wait(rxQueue, 5*time.Second)
		if !ok {
			t.Fatalf("stalled: got %d of %d, sent %d (host fwd %d)", len(recv), size, sent, hostFwd)
		}
		g.post(1)
		var p pkt
		p.decode(u.Out)
		p.data = u.Out[hdrLen:]
		hostBuf, hostFwd = p.BufAlloc, p.FwdCnt
		switch p.Op {
		case opRW:
			recv = append(recv, p.data...)
			fwd += uint32(len(p.data))
			if len(recv)%(32<<10) < len(p.data) {
				g.send(opCreditUpdate, 7, hp, 0, fwd, nil)
			}
		case opCreditRequest:
			g.send(opCreditUpdate, 7, hp, 0, fwd, nil)
		case opCreditUpdate:
		case opShutdown:
			if p.Flags != shutSend {
				t.Fatalf("shutdown flags %d", p.Flags)
			}
			eof = true
		default:
			t.Fatalf("unexpected op %d", p.Op)
		}
	}
	if sha256.Sum256(recv) != sha256.Sum256(up) {
		t.Fatalf("host→guest data differs (%d bytes)", len(recv))
	}
	g.send(opShutdown, 7, hp, shutRcv|shutSend, fwd, nil)
	select {
	case b := <-hostGot:
		if !bytes.Equal(b, down) {
			t.Fatalf("guest→host data differs (%d bytes)", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("host did not get EOF")
	}
	for {
		p := g.recv()
		if p.Op == opRST {
			break
		}
		if p.Op != opCreditUpdate {
			t.Fatalf("op %d before RST", p.Op)
		}
	}
}

func TestCreditOverrunResets(t *testing.T) {
	g := newGuest(t)
	ln, _ := net.Listen("unix", g.dev.uds+"_80")
	defer ln.Close()
	g.send(opRequest, 6000, 80, 0, 0, nil)
	g.expect(opResponse)
	hc, _ := ln.Accept() // never read: the buffer fills up
	defer hc.Close()
	chunk := make([]byte, 64<<10)
	// The unix socket absorbs some; send well past socket buffer + bufAlloc.
	for range 64 {
		g.send(opRW, 6000, 80, 0, 0, chunk)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, ok := g.d.Wait(rxQueue, time.Until(deadline))
		if !ok {
			t.Fatal("no RST after overrunning credit")
		}
		g.post(1)
		var p pkt
		p.decode(u.Out)
		if p.Op == opRST {
			break
		}
	}
}

func TestSaveRestoreTransportReset(t *testing.T) {
	g := newGuest(t)
	g.d.AddKick(evQueue, virtiotest.W(4))
	// A connection the guest still has when the machine is saved.
	old, err := net.Dial("unix", g.dev.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	fmt.Fprintf(old, "CONNECT 9\n")
	oldReq := g.expect(opRequest)
	g.send(opResponse, 9, oldReq.SrcPort, 0, 0, nil)
	if line, err := bufio.NewReader(old).ReadString('\n'); err != nil || !strings.HasPrefix(line, "OK ") {
		t.Fatalf("old connection: %q, %v", line, err)
	}
	g.dev.Transport().Pause()
	s := g.dev.Save()
	g.dev.Close()
	b, _ := json.Marshal(s)
	var s2 State
	if err := json.Unmarshal(b, &s2); err != nil {
		t.Fatal(err)
	}
	dev2, err := New(g.d.Mem, g.d.IRQ, 11, Config{UDS: g.dev.uds})
	if err != nil {
		t.Fatal(err)
	}
	defer dev2.Close()
	if err := dev2.Restore(s2); err != nil {
		t.Fatal(err)
	}
	g.d.Dev, g.dev = dev2.Transport(), dev2
	if u := g.d.MustWait(evQueue); u.Len != 4 || !bytes.Equal(u.Out, []byte{0, 0, 0, 0}) {
		t.Fatalf("event %+v", u)
	}
	// The restored device works: a host connect reaches the guest.
	hc, err := net.Dial("unix", dev2.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	fmt.Fprintf(hc, "CONNECT 9\n")
	// Held until the guest has handled the reset (re-posted the buffer),
	// however late the guest runs (the event was given long ago).
	if u, ok := g.d.Wait(rxQueue, 200*time.Millisecond); ok {
		t.Fatalf("packet before the guest handled TRANSPORT_RESET: %+v", u)
	}
	edges := g.d.IRQ.Edges.Load()
	dev2.mu.Lock()
	dev2.resetSent = dev2.resetSent.Add(-time.Hour)
	dev2.mu.Unlock()
	if u, ok := g.d.Wait(rxQueue, 300*time.Millisecond); ok {
		t.Fatalf("packet before the guest handled a TRANSPORT_RESET given an hour ago: %+v", u)
	}
	// Meanwhile the guest, which may have missed the event's interrupt,
	// is interrupted again.
	if e := g.d.IRQ.Edges.Load(); e <= edges {
		t.Errorf("no interrupt while the reset waited an hour (edges %d, then %d)", edges, e)
	}
	g.d.AddKick(evQueue, virtiotest.W(4))
	// The new connection does not take the port of the one the guest had
	// (its REQUEST would reach that socket until the reset is handled).
	if p := g.expect(opRequest); p.DstPort != 9 || p.SrcPort <= oldReq.SrcPort {
		t.Fatalf("request %+v after restore; the guest's old connection was from port %d", p.hdr, oldReq.SrcPort)
	}
}

// TestHostileGuest sends random packets; the device must neither panic nor
// stop serving.
func TestHostileGuest(t *testing.T) {
	g := newGuest(t)
	r := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		h := hdr{SrcCID: 3, DstCID: HostCID, SrcPort: r.Uint32N(4), DstPort: r.Uint32N(4),
			Type: uint16(r.Uint32N(3)), Op: uint16(r.Uint32N(9)), Flags: r.Uint32N(4),
			BufAlloc: r.Uint32(), FwdCnt: r.Uint32()}
		data := make([]byte, r.IntN(64))
		h.Len = uint32(len(data))
		if r.IntN(10) == 0 {
			h.Len = r.Uint32() // lies about its length
		}
		b := make([]byte, hdrLen)
		h.encode(b)
		g.d.AddKick(txQueue, virtiotest.R(b), virtiotest.R(append(data, 0)))
		for {
			if _, ok := g.d.Poll(txQueue); !ok {
				break
			}
		}
		for g.d.Pending(txQueue) > 16 {
			g.d.Wait(txQueue, time.Second)
		}
		for { // drain replies
			if _, ok := g.d.Poll(rxQueue); !ok {
				break
			}
			g.post(1)
		}
	}
	if s := g.d.Reg32(0x070); s&0x40 != 0 {
		t.Fatalf("device failed: status %#x", s)
	}
	g.send(opRequest, 9999, 4242, 0, 0, nil) // nothing listens: RST
	for {
		p := g.recv()
		if p.Op == opRST && p.DstPort == 9999 {
			break
		}
	}
}

// TestCreditAndTxSignal: guest data well within the VMM's buffer gets no
// CREDIT_UPDATE of its own (the fwd_cnt rides on the next packet to the
// guest), a guest that used up its credit does get one, and the used tx
// buffers are signalled even when nothing else goes to the guest.
func TestCreditAndTxSignal(t *testing.T) {
	g := newGuest(t)
	waitEdge := func(after int64, what string) {
		for deadline := time.Now().Add(5 * time.Second); g.d.IRQ.Edges.Load() == after; {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// connect opens a connection from guest port gport to host port hport.
	connect := func(gport, hport uint32) net.Conn {
		ln, err := net.Listen("unix", fmt.Sprintf("%s_%d", g.dev.uds, hport))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		edges := g.d.IRQ.Edges.Load()
		g.send(opRequest, gport, hport, 0, 0, nil)
		g.expect(opResponse)
		waitEdge(edges, "no interrupt for the RESPONSE")
		hc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hc.Close() })
		return hc
	}
	sendAll := func(gport, hport uint32, data []byte) {
		for off := 0; off < len(data); off += 4096 {
			g.send(opRW, gport, hport, 0, 0, data[off:off+4096])
		}
	}

	// Nothing more goes to the guest: the next interrupt is for the used
	// tx buffers (the REQUEST's, the RW's).
	hc := connect(5000, 1234)
	edges := g.d.IRQ.Edges.Load()
	g.send(opRW, 5000, 1234, 0, 0, []byte("x"))
	waitEdge(edges, "used tx buffers never signalled")

	// Half the buffer more: the host reads it all, and the next packet
	// the guest gets is the host's data (carrying the fwd_cnt), not a
	// CREDIT_UPDATE.
	half := bytes.Repeat([]byte("a"), bufAlloc/2)
	sendAll(5000, 1234, half)
	if _, err := io.ReadFull(hc, make([]byte, 1+len(half))); err != nil {
		t.Fatal(err)
	}
	hc.Write([]byte("y"))
	if p := g.recv(); p.Op != opRW || string(p.data) != "y" {
		t.Fatalf("after half the buffer: %+v %q; want RW \"y\"", p.hdr, p.data)
	}

	// The whole buffer, on a fresh connection: once the host has read
	// it, a CREDIT_UPDATE.
	hc = connect(5001, 1235)
	sendAll(5001, 1235, bytes.Repeat([]byte("b"), bufAlloc))
	if _, err := io.ReadFull(hc, make([]byte, bufAlloc)); err != nil {
		t.Fatal(err)
	}
	if p := g.expect(opCreditUpdate); p.DstPort != 5001 || p.FwdCnt == 0 {
		t.Fatalf("credit update %+v", p.hdr)
	}
}
