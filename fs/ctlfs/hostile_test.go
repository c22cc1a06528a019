package ctlfs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/fs/ctlfs"

	"sandfs/ctl"
	sfs "sandfs/fs"
	"sandfs/fs/client"
	"sandfs/fs/ninep"
)

// hostileAgent is a guest agent that lies: a 9P2000.L server written
// frame by frame, so that it can send what p9's own server never would.
// One per connection (its fids are the connection's). Its tree:
//
//	procs/clone   read: a 100-byte "slot" (the daemon reads 32)
//	fs/hello      "hello\n", honestly
//	fs/long       Rread: count and payload of what was asked + 100 bytes
//	fs/huge       Rread: a whole msize of payload for any count (the p9
//	              client's own "bytes completed > requested" panic)
//	fs/short      Rread: count 1000 more than its 10-byte payload
//	fs/wlong      Rwrite: count 100 more than was written
//	fs/slow       Tread never answered
//	fs/hang       Twalk to it never answered
//	fs/endless/   Rreaddir: fresh entries and offsets forever
//	fs/loop/      Rreaddir: one entry at offset 1, whatever was asked
//	fs/slash/     an entry named "a/b"
type hostileAgent struct {
	c     net.Conn
	msize uint32
	fids  map[uint32]string // fid -> path, "" the root
}

var hostileTree = map[string]bool{ // path -> is a directory
	"": true, "procs": true, "procs/clone": false, "fs": true,
	"fs/hello": false, "fs/long": false, "fs/huge": false, "fs/short": false, "fs/slow": false, "fs/hang": false, "fs/wlong": false,
	"fs/endless": true, "fs/loop": true, "fs/slash": true,
}

// 9P2000.L message types (Linux net/9p/protocol; p9/p9.go).
const (
	rlerror    = 7
	tlopen     = 12
	tgetattr   = 24
	treaddir   = 40
	tversion   = 100
	tattach    = 104
	tflush     = 108
	twalk      = 110
	tread      = 116
	twrite     = 118
	tclunk     = 120
	qidTypeDir = 0x80
)

// frame is a 9P message body being built, little-endian.
type frame []byte

func (f frame) u8(v uint8) frame   { return append(f, v) }
func (f frame) u16(v uint16) frame { return binary.LittleEndian.AppendUint16(f, v) }
func (f frame) u32(v uint32) frame { return binary.LittleEndian.AppendUint32(f, v) }
func (f frame) u64(v uint64) frame { return binary.LittleEndian.AppendUint64(f, v) }
func (f frame) str(s string) frame { return append(f.u16(uint16(len(s))), s...) }

func (f frame) qid(path string) frame {
	t := uint8(0)
	if hostileTree[path] {
		t = qidTypeDir
	}
	return f.u8(t).u32(0).u64(uint64(len(path)) + 1)
}

func serveHostile(c net.Conn) {
	a := &hostileAgent{c: c, fids: map[uint32]string{}}
	defer c.Close()
	for {
		var hdr [7]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		size := binary.LittleEndian.Uint32(hdr[:4])
		if size < 7 || size > 1<<21 {
			return
		}
		body := make([]byte, size-7)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		if err := a.handle(hdr[4], binary.LittleEndian.Uint16(hdr[5:]), body); err != nil {
			return
		}
	}
}

// reply sends message typ with tag and body.
func (a *hostileAgent) reply(typ uint8, tag uint16, body frame) error {
	f := frame(nil).u32(uint32(7 + len(body))).u8(typ).u16(tag)
	_, err := a.c.Write(append(f, body...))
	return err
}

func (a *hostileAgent) errno(tag uint16, e syscall.Errno) error {
	return a.reply(rlerror, tag, frame(nil).u32(uint32(e)))
}

func (a *hostileAgent) handle(typ uint8, tag uint16, b []byte) error {
	le := binary.LittleEndian
	switch typ {
	case tversion:
		a.msize = le.Uint32(b)
		return a.reply(tversion+1, tag, frame(nil).u32(a.msize).str("9P2000.L"))
	case tattach:
		a.fids[le.Uint32(b)] = ""
		return a.reply(tattach+1, tag, frame(nil).qid(""))
	case twalk:
		p, ok := a.fids[le.Uint32(b)]
		if !ok {
			return a.errno(tag, syscall.EBADF)
		}
		newfid, n := le.Uint32(b[4:]), int(le.Uint16(b[8:]))
		b = b[10:]
		r := frame(nil).u16(uint16(n))
		for range n {
			l := int(le.Uint16(b))
			name := string(b[2 : 2+l])
			b = b[2+l:]
			if p == "" {
				p = name
			} else {
				p += "/" + name
			}
			if _, ok := hostileTree[p]; !ok {
				return a.errno(tag, syscall.ENOENT)
			}
			if p == "fs/hang" {
				return nil // never answered
			}
			r = r.qid(p)
		}
		a.fids[newfid] = p
		return a.reply(twalk+1, tag, r)
	case tgetattr:
		p := a.fids[le.Uint32(b)]
		mode := uint32(0o100644)
		if hostileTree[p] {
			mode = 0o040755
		}
		r := frame(nil).u64(0x3fff).qid(p).u32(mode).u32(0).u32(0).u64(1).u64(0).u64(6).u64(4096).u64(0)
		for range 10 { // atime, mtime, ctime, btime (s, ns); gen; data version
			r = r.u64(0)
		}
		return a.reply(tgetattr+1, tag, r)
	case tlopen:
		return a.reply(tlopen+1, tag, frame(nil).qid(a.fids[le.Uint32(b)]).u32(0))
	case tread:
		p, off, count := a.fids[le.Uint32(b)], le.Uint64(b[4:]), le.Uint32(b[12:])
		var data []byte
		switch p {
		case "procs/clone":
			data = []byte(strings.Repeat("1", 99) + "\n")
		case "fs/hello":
			data = []byte("hello\n")[min(off, 6):]
			data = data[:min(len(data), int(count))]
		case "fs/long":
			data = make([]byte, min(count+100, a.msize-11))
		case "fs/huge":
			data = make([]byte, a.msize-11)
		case "fs/short":
			return a.reply(tread+1, tag, frame(nil).u32(count+1000).u64(0).u16(0))
		case "fs/slow":
			return nil
		}
		return a.reply(tread+1, tag, append(frame(nil).u32(uint32(len(data))), data...))
	case twrite:
		n := le.Uint32(b[12:])
		if a.fids[le.Uint32(b)] == "fs/wlong" {
			n += 100
		}
		return a.reply(twrite+1, tag, frame(nil).u32(n))
	case treaddir:
		p, off, count := a.fids[le.Uint32(b)], le.Uint64(b[4:]), le.Uint32(b[12:])
		var ents frame
		add := func(name string, next uint64, dir bool) bool {
			typ := uint8(0)
			if dir {
				typ = qidTypeDir
			}
			e := frame(nil).qid(p + "/" + name).u64(next).u8(typ).str(name)
			if len(ents)+len(e) > int(count) {
				return false
			}
			ents = append(ents, e...)
			return true
		}
		switch p {
		case "fs/endless":
			for i := off; add(fmt.Sprintf("e%d", i), i+1, false); i++ {
			}
		case "fs/loop":
			add("again", 1, false)
		case "fs/slash":
			if off == 0 {
				add("a/b", 1, false)
			}
		default:
			var names []string
			for q := range hostileTree {
				if d, name := path.Split(q); q != "" && strings.TrimSuffix(d, "/") == p {
					names = append(names, name)
				}
			}
			slices.Sort(names)
			for i := int(off); i < len(names) && add(names[i], uint64(i+1), hostileTree[path.Join(p, names[i])]); i++ {
			}
		}
		return a.reply(treaddir+1, tag, append(frame(nil).u32(uint32(len(ents))), ents...))
	case tclunk:
		delete(a.fids, le.Uint32(b))
		return a.reply(tclunk+1, tag, nil)
	case tflush:
		return a.reply(tflush+1, tag, nil)
	}
	return a.errno(tag, syscall.ENOSYS)
}

// hostileRuntime starts sandboxes whose id begins with "evil" with a
// hostileAgent as their guest, the others with a real testAgent.
type hostileRuntime struct{ *agentRuntime }

func (r hostileRuntime) Start(ctx context.Context, s ctl.Spec) (ctl.Machine, error) {
	if strings.HasPrefix(s.ID, "evil") {
		return hostileMachine{newFakeMachine()}, nil
	}
	return r.agentRuntime.Start(ctx, s)
}

type hostileMachine struct{ *fakeMachine }

var _ ctl.GuestDialer = hostileMachine{}

func (hostileMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	c, s := net.Pipe()
	go serveHostile(s)
	return c, nil
}

// TestHostileGuest attaches a lying guest agent (hostileAgent) as the
// guest of sandbox evil, beside sandbox ok with a real one, in one tree
// served over 9P (and FUSE where it works). Each lie fails only evil's
// request, with EIO and a text in evil's err that names it; no panic
// reaches the process; ok keeps working throughout.
func TestHostileGuest(t *testing.T) {
	d, o, me := ctlfs.GuestDialTimeout, ctlfs.GuestOpTimeout, ninep.MaxDirEntries
	t.Cleanup(func() { ctlfs.GuestDialTimeout, ctlfs.GuestOpTimeout, ninep.MaxDirEntries = d, o, me })
	ctlfs.GuestDialTimeout, ctlfs.GuestOpTimeout, ninep.MaxDirEntries = 2*time.Second, 2*time.Second, 10000

	rt := hostileRuntime{&agentRuntime{t: t, agents: map[string]*testAgent{}}}
	p, err := ctl.Open(t.TempDir(), rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tree := ctlfs.New(p, nil)
	for _, id := range []string{"evil", "ok"} {
		if _, err := p.Ctl(context.Background(), []byte("new "+id)); err != nil {
			t.Fatalf("new %s: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr := serve9P(t, tree.Root(), "unix", "")
	c, err := client.Dial(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// fresh is a new connection to the tree, for checks after an attack
	// whose failures may have left c's own session in doubt.
	fresh := func(t *testing.T) *client.Client {
		t.Helper()
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c2, err := client.Dial(dctx, addr, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c2.Close() })
		return c2
	}

	okWorks := func(t *testing.T) {
		t.Helper()
		var out strings.Builder
		st, err := c.Exec(context.Background(), "ok", client.ExecOptions{Argv: []string{"echo", "still here"}, Stdout: &out})
		if err != nil || out.String() != "still here\n" || st.ExitCode() != 0 {
			t.Errorf("exec in ok = %q, %+v, %v; want it unaffected by evil", out.String(), st, err)
		}
		if _, err := c.ReadDir("sandboxes/ok/procs"); err != nil {
			t.Errorf("ls ok/procs: %v", err)
		}
	}
	// refused checks that err is EIO and that evil's err holds each of want.
	refused := func(t *testing.T, what string, err error, want ...string) {
		t.Helper()
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s = %v; want EIO", what, err)
		}
		b, _ := c.ReadFile("sandboxes/evil/err")
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("after %s, evil/err = %q; want it to name %q", what, b, w)
			}
		}
	}

	if b, err := c.ReadFile("sandboxes/evil/fs/hello"); err != nil || string(b) != "hello\n" {
		t.Fatalf("fs/hello of the hostile agent = %q, %v; the fake itself is broken", b, err)
	}
	t.Run("Rread longer than asked", func(t *testing.T) {
		_, err := c.ReadFile("sandboxes/evil/fs/long")
		refused(t, "read fs/long", err, "bad reply to read fs/long", "Rread of", "bytes for a read of")
		okWorks(t)
	})
	t.Run("Rread of a whole msize", func(t *testing.T) {
		_, err := c.ReadFile("sandboxes/evil/fs/huge")
		refused(t, "read fs/huge", err, "bad reply to read fs/huge")
		okWorks(t)
	})
	t.Run("Rread count beyond its payload", func(t *testing.T) {
		_, err := c.ReadFile("sandboxes/evil/fs/short")
		refused(t, "read fs/short", err, "bad reply to read fs/short", "no valid message")
		okWorks(t)
	})
	t.Run("Rwrite longer than written", func(t *testing.T) {
		f, err := c.Open("sandboxes/evil/fs/wlong", syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Write([]byte("data"))
		f.Close()
		refused(t, "write fs/wlong", err, "bad reply to write fs/wlong", "Rwrite of 104 bytes for a write of 4")
		okWorks(t)
	})
	t.Run("exec with an oversized slot", func(t *testing.T) {
		err := c.WriteMsg("sandboxes/evil/exec", "true", "")
		refused(t, "write exec", err, "bad reply to read procs/clone", "Rread of 100 bytes for a read of 32")
		okWorks(t)
	})
	t.Run("endless directory", func(t *testing.T) {
		_, err := c.ReadDir("sandboxes/evil/fs/endless")
		refused(t, "ls fs/endless", err, "bad reply to readdir fs/endless", "more than 10000 entries")
		okWorks(t)
	})
	t.Run("readdir offsets that come back", func(t *testing.T) {
		_, err := c.ReadDir("sandboxes/evil/fs/loop")
		refused(t, "ls fs/loop", err, "bad reply to readdir fs/loop", "offset 1 came back")
		okWorks(t)
	})
	t.Run("entry name with a slash", func(t *testing.T) {
		_, err := c.ReadDir("sandboxes/evil/fs/slash")
		refused(t, "ls fs/slash", err, "bad entry name", `"a/b"`)
		okWorks(t)
	})
	t.Run("FUSE", func(t *testing.T) {
		mnt := mountFUSE(t, tree.Root()).dir
		_, err := os.ReadFile(filepath.Join(mnt, "sandboxes/evil/fs/long"))
		refused(t, "FUSE read fs/long", err, "bad reply to read fs/long")
		_, err = os.ReadFile(filepath.Join(mnt, "sandboxes/evil/fs/huge"))
		refused(t, "FUSE read fs/huge", err, "bad reply to read fs/huge", "panic")
		_, err = os.ReadDir(filepath.Join(mnt, "sandboxes/evil/fs/endless"))
		refused(t, "FUSE ls fs/endless", err, "more than 10000 entries")
		if got := mustSh(t, mnt, "echo 'echo via fuse' > sandboxes/ok/exec; cat sandboxes/ok/exec"); got != "via fuse\n" {
			t.Errorf("exec in ok through FUSE = %q", got)
		}
	})
	t.Run("reply that never comes", func(t *testing.T) {
		// A bounded request times out (the session is closed) while ok
		// answers at once.
		done := make(chan error, 1)
		go func() { _, err := c.ReadFile("sandboxes/evil/fs/hang"); done <- err }()
		start := time.Now()
		okWorks(t)
		if d := time.Since(start); d > ctlfs.GuestOpTimeout {
			t.Errorf("ok took %v while evil hung", d)
		}
		if err := <-done; !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("walk fs/hang = %v; want ETIMEDOUT", err)
		}
		b, _ := c.ReadFile("sandboxes/evil/err")
		if !strings.Contains(string(b), "no answer to walk fs/hang") {
			t.Errorf("evil/err = %q; want the walk that timed out", b)
		}
	})
	t.Run("reads given up without an answer", func(t *testing.T) {
		// A data read is not timed (a FIFO may wait), only interrupted;
		// each interrupted read that the guest never answers holds a
		// goroutine and a buffer, so after a few the session is closed.
		bg := context.Background()
		n, err := sfs.Walk(bg, tree.Root(), "sandboxes/evil/fs/slow")
		if err != nil {
			t.Fatal(err)
		}
		h, err := sfs.Open(bg, n, sfs.ReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var b []byte
		for i := 0; i < 100 && !strings.Contains(string(b), "given up without an answer"); i++ {
			rctx, cancel := context.WithCancel(bg)
			time.AfterFunc(50*time.Millisecond, cancel) // as a FUSE interrupt
			_, err := h.Read(rctx, make([]byte, 64<<10), 0)
			b, _ = c.ReadFile("sandboxes/evil/err")
			// The session is closed (and err says why) just after the
			// read that went over the bound returned EINTR, so a read
			// may meet the closed session before the loop sees err.
			if !errors.Is(err, syscall.EINTR) {
				// The read that went over the bound returned EINTR and
				// the session is being closed: err says why at once or
				// within moments.
				for deadline := time.Now().Add(2 * time.Second); !strings.Contains(string(b), "given up without an answer") && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					b, _ = c.ReadFile("sandboxes/evil/err")
				}
				if !strings.Contains(string(b), "given up without an answer") {
					t.Fatalf("interrupted read %d = %v; want EINTR", i, err)
				}
			}
		}
		if !strings.Contains(string(b), "given up without an answer") {
			t.Errorf("evil/err = %q; want the session closed for unanswered reads", b)
		}
		// A new session is dialled on the next request; give it time
		// on a loaded machine, over a connection of its own.
		c2 := fresh(t)
		var hb []byte
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if hb, err = c2.ReadFile("sandboxes/evil/fs/hello"); (err == nil && string(hb) == "hello\n") || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || string(hb) != "hello\n" {
			t.Errorf("fs/hello after = %q, %v; want a new session", hb, err)
		}
		var out strings.Builder
		st, err := c2.Exec(context.Background(), "ok", client.ExecOptions{Argv: []string{"echo", "still here"}, Stdout: &out})
		if err != nil || out.String() != "still here\n" || st.ExitCode() != 0 {
			t.Errorf("exec in ok = %q, %+v, %v; want it unaffected by evil", out.String(), st, err)
		}
	})
}

// TestHostileRemote is the same lying server behind ninep.Remote (the
// client side of `sandfs mount`): its lies are EIO, not a panic.
func TestHostileRemote(t *testing.T) {
	me := ninep.MaxDirEntries
	t.Cleanup(func() { ninep.MaxDirEntries = me })
	ninep.MaxDirEntries = 1000
	cc, sc := net.Pipe()
	go serveHostile(sc)
	r, err := ninep.NewRemote(cc, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	for _, name := range []string{"fs/long", "fs/huge"} {
		n, err := sfs.Walk(ctx, r.Root(), name)
		if err != nil {
			t.Fatal(err)
		}
		h, err := sfs.Open(ctx, n, sfs.ReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.Read(ctx, make([]byte, 4096), 0)
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "bad 9P reply") {
			t.Errorf("read %s = %v; want EIO, bad 9P reply", name, err)
		}
		h.Close()
	}
	for _, name := range []string{"fs/endless", "fs/loop", "fs/slash"} {
		n, err := sfs.Walk(ctx, r.Root(), name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.(sfs.Dir).List(ctx); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "bad 9P reply") {
			t.Errorf("list %s = %v; want EIO, bad 9P reply", name, err)
		}
	}
}
