package ninep

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
	"sandfs/test/syncbuf"
)

// The attacks of issue 10 item 6: a TCP client that has not shown the
// token tries to make the daemon allocate without bound. Each test runs
// an attack against a server on 127.0.0.1 with a token, asserts that the
// server refuses it (closes the connection, or answers within bounds),
// and that a client attached before the attack still reads its file.

const testToken = "0123456789abcdef0123456789abcdef"

// textFile is a read-only file with fixed content.
type textFile string

func (f textFile) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: 0o444, Size: int64(len(f))}, nil
}
func (f textFile) Text(_ context.Context, b *bytes.Buffer) error {
	b.WriteString(string(f))
	return nil
}

// target is a server under attack and a client that attached before.
type target struct {
	t     *testing.T
	addr  string // host:port
	log   *syncbuf.Buffer
	legit p9.File // the attached client's root
}

// newTarget serves a tree holding hello ("hi\n") on 127.0.0.1 with
// testToken, limits lim, and attaches a legitimate client from 127.0.0.1.
func newTarget(t *testing.T, lim limits) *target {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncbuf.Buffer{}
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, slog.New(slog.NewTextHandler(log, nil)))
	srv.lim = lim
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, l, testToken) }()
	t.Cleanup(func() { cancel(); <-done })
	tg := &target{t: t, addr: l.Addr().String(), log: log}
	root, err := tg.attach("127.0.0.1")
	if err != nil {
		t.Fatalf("legitimate client before the attack: %v", err)
	}
	tg.legit = root
	tg.checkLegit()
	return tg
}

// dial connects from local address ip (any of 127/8 on Linux).
func (tg *target) dial(ip string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", tg.addr)
}

// attach connects from ip as a legitimate client: version, attach with
// the token, within 5 s.
func (tg *target) attach(ip string) (p9.File, error) {
	c, err := tg.dial(ip)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	cl, err := p9.NewClient(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("version: %w", err)
	}
	root, err := cl.Attach(testToken)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	c.SetDeadline(time.Time{})
	tg.t.Cleanup(func() { cl.Close() })
	return root, nil
}

// readHello reads hello through root.
func readHello(root p9.File) (string, error) {
	_, f, err := root.Walk([]string{"hello"})
	if err != nil {
		return "", fmt.Errorf("walk: %w", err)
	}
	defer f.Close()
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		return "", fmt.Errorf("open: %w", err)
	}
	b := make([]byte, 64)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read: %w", err)
	}
	return string(b[:n]), nil
}

// checkLegit: the client attached before the attack still works.
func (tg *target) checkLegit() {
	tg.t.Helper()
	if got, err := readHello(tg.legit); err != nil || got != "hi\n" {
		tg.t.Errorf("attached client: read hello = %q, %v; want \"hi\\n\"", got, err)
	}
}

// frame builds one 9P frame.
func frame(typ uint8, tag uint16, body ...any) []byte {
	b := []byte{0, 0, 0, 0, typ, 0, 0}
	binary.LittleEndian.PutUint16(b[5:], tag)
	for _, v := range body {
		switch v := v.(type) {
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, v)
		case string:
			b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		}
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	return b
}

var tversion = frame(tver, noTag, uint32(8192), "9P2000.L")

// closedWithin reads and discards c's replies until the server closes
// the connection; it fails the test if that takes longer than d. It
// returns the replies it read.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var got bytes.Buffer
	_, err := io.Copy(&got, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %d bytes of replies); want it closed", d, got.Len())
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v; want EOF or a reset", err)
	}
	return got.Bytes()
}

// TestPreAuthBigFrame: a frame announcing 4 MiB before attach is refused
// from its header; the server does not wait for (or buffer) the rest.
func TestPreAuthBigFrame(t *testing.T) {
	tg := newTarget(t, defaultLimits)
	c, err := tg.dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := frame(tver, noTag, uint32(8192), "9P2000.L"+strings.Repeat("x", 64<<10))
	binary.LittleEndian.PutUint32(big, 4<<20)
	go c.Write(big) // fails once the server has closed
	closedWithin(t, c, 2*time.Second)
	tg.checkLegit()
	if !strings.Contains(tg.log.String(), "bad frame size 4194304 (max 8192)") {
		t.Errorf("server log does not say why:\n%s", tg.log)
	}
}

// TestPreAuthWalkFlood: walks from fids never attached (each storing a
// path in the old frame observer) end the connection at the first one,
// unanswered.
func TestPreAuthWalkFlood(t *testing.T) {
	tg := newTarget(t, defaultLimits)
	c, err := tg.dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := make([]any, 0, 17)
	names = append(names, uint16(16))
	for range 16 {
		names = append(names, strings.Repeat("n", 400))
	}
	go func() {
		c.Write(tversion)
		for i := range 1000 {
			if _, err := c.Write(frame(twalk, uint16(i), append([]any{uint32(0), uint32(i + 1)}, names...)...)); err != nil {
				return
			}
		}
	}()
	replies := closedWithin(t, c, 2*time.Second)
	if len(replies) < 7 || replies[4] != rver || len(replies) != int(binary.LittleEndian.Uint32(replies)) {
		t.Errorf("replies %x; want Rversion alone (no walk answered)", replies)
	}
	tg.checkLegit()
}

// TestPreAuthAttachFlood: a client guessing tokens gets EPERM for each
// guess, and the connection ends after preAuthFrames requests.
func TestPreAuthAttachFlood(t *testing.T) {
	tg := newTarget(t, defaultLimits)
	c, err := tg.dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		c.Write(tversion)
		for i := range 1000 {
			if _, err := c.Write(frame(tattch, uint16(i), uint32(1), noFID, "", fmt.Sprintf("guess%d", i), noFID)); err != nil {
				return
			}
		}
	}()
	replies := closedWithin(t, c, 2*time.Second)
	var eperm int
	for len(replies) >= 7 {
		size := binary.LittleEndian.Uint32(replies)
		if replies[4] == rlerr && binary.LittleEndian.Uint32(replies[7:]) == uint32(syscall.EPERM) {
			eperm++
		} else if replies[4] != rver {
			t.Errorf("reply type %d; want Rversion or Rlerror EPERM", replies[4])
		}
		replies = replies[size:]
	}
	if eperm == 0 || eperm >= defaultLimits.preAuthFrames {
		t.Errorf("%d guesses answered EPERM; want between 1 and %d", eperm, defaultLimits.preAuthFrames-1)
	}
	tg.checkLegit()
}

// TestPreAuthIdle: a connection that does not attach within authTimeout
// is closed, whether silent or stopped after Tversion.
func TestPreAuthIdle(t *testing.T) {
	lim := defaultLimits
	lim.authTimeout = 300 * time.Millisecond
	tg := newTarget(t, lim)
	// Before the dials: the server's wait starts at each accept, after
	// this (timed after the dials, a loaded machine's slow dials and
	// write counted against the wait).
	start := time.Now()
	silent, err := tg.dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	versioned, err := tg.dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer versioned.Close()
	versioned.Write(tversion)
	closedWithin(t, silent, 3*time.Second)
	closedWithin(t, versioned, 3*time.Second)
	if d := time.Since(start); d < lim.authTimeout {
		t.Errorf("closed %v after the dials began; want at least %v", d, lim.authTimeout)
	}
	tg.checkLegit()
	if !strings.Contains(tg.log.String(), "no attach within 300ms") {
		t.Errorf("server log does not say why:\n%s", tg.log)
	}
}

// TestPreAuthConnectionFlood: one host holds at most perHost unattached
// connections and the listener at most total; more are closed at once.
// Another host still gets in while one host floods, attached clients
// (from the flooding host too) hold no slot, and slots come back when
// the flood ends.
func TestPreAuthConnectionFlood(t *testing.T) {
	lim := defaultLimits
	lim.perHost, lim.total = 4, 6
	tg := newTarget(t, lim)
	// Attached connections hold no slot: more than perHost in a row.
	for i := range lim.perHost + 2 {
		if _, err := tg.attach("127.0.0.1"); err != nil {
			t.Fatalf("attach %d from 127.0.0.1: %v", i, err)
		}
	}
	flood := func(ip string, n int) []net.Conn {
		var cs []net.Conn
		for range n {
			c, err := tg.dial(ip)
			if err != nil {
				t.Fatal(err)
			}
			c.Write(tversion)
			cs = append(cs, c)
			t.Cleanup(func() { c.Close() })
		}
		return cs
	}
	// Held: the first perHost from 127.0.0.1 get Rversion; the rest are
	// closed without one.
	held := flood("127.0.0.1", lim.perHost)
	for i, c := range held {
		raw := &raw{t: t, c: c}
		if typ, _, _ := raw.recv(); typ != rver {
			t.Fatalf("held connection %d: reply %d; want Rversion", i, typ)
		}
	}
	for _, c := range flood("127.0.0.1", 8) {
		if got := closedWithin(t, c, time.Second); len(got) != 0 {
			t.Errorf("connection over the per-host limit got %d bytes of replies; want none", len(got))
		}
	}
	// Another host gets in while 127.0.0.1 is at its limit, until the
	// listener's total is reached.
	if _, err := tg.attach("127.0.0.2"); err != nil {
		t.Errorf("attach from 127.0.0.2 while 127.0.0.1 floods: %v", err)
	}
	flood("127.0.0.3", lim.total-lim.perHost)
	if _, err := tg.attach("127.0.0.2"); err == nil {
		t.Errorf("attach from 127.0.0.2 with %d connections waiting: succeeded; want refused", lim.total)
	}
	tg.checkLegit()
	// The flood ends: slots come back.
	for _, c := range held {
		c.Close()
	}
	var err error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = tg.attach("127.0.0.1"); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("attach from 127.0.0.1 after its flood ended: %v", err)
	}
	if !strings.Contains(tg.log.String(), "refusing connections") {
		t.Errorf("server log does not say it refused connections:\n%s", tg.log)
	}
}

// TestVersionMsizeClamped: a Tversion asking for p9's 4 MiB maximum gets
// maxMsize back (p9 allocates the agreed size at every Tversion).
func TestVersionMsizeClamped(t *testing.T) {
	tg := newTarget(t, defaultLimits)
	c, err := tg.dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &raw{t: t, c: c}
	c.Write(frame(tver, noTag, uint32(4<<20), "9P2000.L"))
	if body := r.expect(rver, noTag); binary.LittleEndian.Uint32(body) != maxMsize {
		t.Errorf("Rversion msize %d; want %d", binary.LittleEndian.Uint32(body), maxMsize)
	}
	// And an attached client may then send frames up to maxMsize.
	r.send(tattch, 1, uint32(1), noFID, "", testToken, noFID)
	r.expect(rattch, 1)
	names := []any{uint16(16)}
	for range 16 {
		names = append(names, strings.Repeat("n", 4000))
	}
	r.send(twalk, 2, append([]any{uint32(1), uint32(2)}, names...)...)
	r.expect(rlerr, 2)
}

// TestFailedWalksLeaveNoFid: an attached client's walks that fail (or
// start from fids p9 does not hold) leave no fid path behind; the old
// observer kept one per Twalk, whatever p9 answered.
func TestFailedWalksLeaveNoFid(t *testing.T) {
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	cc, sc := net.Pipe()
	cn := newConn(context.Background(), srv, sc, "", cred.Nobody, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p9.NewServer(cn).Handle(newFrameReader(sc, cn), &replyWriter{w: sc, c: cn})
	}()
	defer func() { cc.Close(); <-done }()
	r := &raw{t: t, c: cc}
	r.attach(8192)
	for i := range 100 {
		r.send(twalk, 2, uint32(1), uint32(100+i), uint16(1), fmt.Sprintf("nosuch%d", i))
		r.expect(rlerr, 2)
		r.send(twalk, 3, uint32(5000+i), uint32(200+i), uint16(1), "hello")
		r.expect(rlerr, 3)
	}
	r.send(twalk, 4, uint32(1), uint32(2), uint16(1), "hello")
	r.expect(rwalk, 4)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	want := map[uint32]string{1: "", 2: "hello"}
	if fmt.Sprint(cn.fidPaths) != fmt.Sprint(want) {
		t.Errorf("fid paths %v; want %v (only the fids p9 holds)", cn.fidPaths, want)
	}
	if len(cn.walks)+len(cn.attaches)+len(cn.reads) != 0 {
		t.Errorf("requests still pending after their replies: walks %v attaches %v reads %v", cn.walks, cn.attaches, cn.reads)
	}
}

// emfileListener fails its first n Accepts with EMFILE, as a listener
// does while a flood holds every descriptor.
type emfileListener struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	fail := l.n > 0
	l.n--
	l.mu.Unlock()
	if fail {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptEMFILE: running out of descriptors for a moment (a flood)
// does not end the listener, and with it the daemon.
func TestAcceptEMFILE(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var serveErr error
	go func() { defer close(done); serveErr = srv.Serve(ctx, &emfileListener{Listener: l, n: 3}, testToken) }()
	defer func() { cancel(); <-done }()
	tg := &target{t: t, addr: l.Addr().String()}
	root, err := tg.attach("127.0.0.1")
	if err != nil {
		select {
		case <-done:
			t.Fatalf("Serve returned %v after EMFILE", serveErr)
		default:
		}
		t.Fatalf("attach after EMFILE: %v", err)
	}
	tg.legit = root
	tg.checkLegit()
}
