package ctlfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl"
	sfs "sandfs/fs"
	"sandfs/fs/ninep"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// A sandbox's procs/ and fs/ are the guest agent's own (package guest),
// imported Plan 9 style: binds of the agent's 9P tree (ninep.Remote),
// reached with ctl's Sandbox.DialGuest, never a copy.
//
//	$ ls /n/sandfs/sandboxes/t/procs
//	1  3  clone
//
// One guestLink per sandbox holds that Remote. ctl keeps it
// (Sandbox.GuestLink) and closes it when the sandbox ends, which closes
// its sessions. The Remote dials its shared session at the first walk
// into procs/ or fs/ (or exec) and again when it has died; blocking reads
// (procs/<n>/stdout, stderr, wait and exec's output) each get a private
// session: the agent cannot cut a read short on flush or clunk (guest
// package doc, "Blocking reads"), only by the connection ending, so
// interrupting such a read closes its private connection.
//
// Bounds (ninep.Remote): dialling (vsock, version, attach) gives up after
// GuestDialTimeout; requests that never block in a healthy agent after
// GuestOpTimeout, which also closes the session. Failures of the
// connection itself (dial, timeout, lost, a bad reply: every reply is
// input, fs/ninep/guard.go) leave their text in the sandbox's err, and so
// does every refusal by the agent of a write, create, mkdir, remove or
// truncate (refused). Symbolic links under fs/ are followed within the
// guest's root (the node model has no links): fs/bin is the directory
// the guest's /bin points to.

// Timeouts of guest requests; variables so tests can shorten them. A
// link takes them when it is made.
var (
	GuestDialTimeout = 30 * time.Second // a fresh sandbox boots in seconds, nested under TCG and loaded in tens
	GuestOpTimeout   = 15 * time.Second
)

// guestMsize is the 9P message size asked of the agent. The agent's
// server (fs/ninep) grants at most 512 KiB and clamps each Rread to it,
// but hugelgupf/p9's client keeps the size it asked for, so it sends
// reads up to guestReadMax whole: one read is one request, never split
// into several (which on a stream would wait for more data after a full
// first part), and a short reply is an ordinary short read.
const (
	guestMsize   = 1 << 20
	guestReadMax = 512 << 10
)

// guestLink is the daemon's side of one sandbox's guest agent.
type guestLink struct {
	sb *ctl.Sandbox
	r  *ninep.Remote

	execMu   sync.Mutex // protects lastExec
	lastExec string     // slot of the last command written to exec, "" none
}

// linkOf returns sb's link, made on first use.
func linkOf(sb *ctl.Sandbox) *guestLink {
	return sb.GuestLink(func() io.Closer { return newGuestLink(sb) }).(*guestLink)
}

func newGuestLink(sb *ctl.Sandbox) *guestLink {
	g := &guestLink{sb: sb}
	g.r = ninep.NewDialing(ninep.Options{
		Name:        fmt.Sprintf("guest: sandbox %q", sb.ID()),
		Aname:       "/",
		Dial:        g.dialRetry,
		Msize:       guestMsize,
		ReadMax:     guestReadMax,
		DialTimeout: GuestDialTimeout,
		OpTimeout:   GuestOpTimeout,
		Private:     isStream,
		Messages:    isCtl,
		Blocking:    isStdin,
		Once:        func(p string) bool { return p == "procs/clone" || p == agentWatch },
		Check:       g.checkRunning,
		Fail:        sb.Fail,
		Refused:     g.refused,
	})
	return g
}

// Close implements io.Closer: ctl calls it when the sandbox ends.
func (g *guestLink) Close() error { return g.r.Close() }

// Hangup implements ctl.LinkHanger: ctl calls it when the sandbox's
// guest is restored in a new machine (a resume from disk): the next use
// dials that one.
func (g *guestLink) Hangup() { g.r.Hangup() }

var _ ctl.LinkHanger = (*guestLink)(nil)

// newGuestBind returns the bind point of the agent's directory name
// ("procs" or "fs") for sandbox sb. Its Stat answers without the guest,
// so that listing a sandbox never waits for it.
func newGuestBind(sb *ctl.Sandbox, name string, mode iofs.FileMode) sfs.Node {
	o := ninep.BindOptions{Links: name == "fs", Messages: name == "procs", ReadAhead: name == "fs"}
	return linkOf(sb).r.Bind(name, sfs.Attr{Mode: iofs.ModeDir | mode.Perm()}, o)
}

// isStream reports whether the agent's file at path is a blocking one
// (procs/<n>/stdout, stderr, wait; watch), which gets a private session.
func isStream(path string) bool {
	if path == agentWatch {
		return true
	}
	names := strings.Split(path, "/")
	if len(names) != 3 || names[0] != "procs" {
		return false
	}
	switch names[2] {
	case "stdout", "stderr", "wait":
		return true
	}
	return false
}

// isCtl reports whether the agent's file at path is a ctl file
// (procs/clone, procs/<n>/ctl; watch), whose writes are answered at once.
func isCtl(path string) bool {
	names := strings.Split(path, "/")
	return path == "procs/clone" || path == agentWatch || (len(names) == 3 && names[0] == "procs" && names[2] == "ctl")
}

// isStdin reports whether path is a process's stdin in the agent's tree
// (procs/<n>/stdin): a write blocks while the pipe is full.
func isStdin(path string) bool {
	names := strings.Split(path, "/")
	return len(names) == 3 && names[0] == "procs" && names[2] == "stdin"
}

// IsStdin reports whether path (slash-separated, from the tree's root) is
// a process's stdin in the daemon's tree, sandboxes/<id>/procs/<n>/stdin:
// the one file whose writes may block, for a client of the tree such as
// `sandfs mount` (ninep.Options.Blocking).
func IsStdin(path string) bool {
	names := strings.SplitN(path, "/", 3)
	return len(names) == 3 && names[0] == "sandboxes" && isStdin(names[2])
}

// dialRetry dials the agent, retrying while the VMM refuses the
// connection (nothing listens on the port yet: the guest is still
// booting, a sandbox fresh from `new`) until ctx ends.
func (g *guestLink) dialRetry(ctx context.Context) (net.Conn, error) {
	wait := 20 * time.Millisecond
	for {
		c, err := g.sb.DialGuest(ctx, hybrid.AgentPort)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// checkRunning refuses at once (EBUSY) when the sandbox is not running:
// a paused guest would not answer, and a session dialled before the
// pause would only time out. The refusal goes to the sandbox's err,
// except over the reason an ended sandbox died.
func (g *guestLink) checkRunning() error {
	st := g.sb.State()
	if st == ctl.StateRunning {
		return nil
	}
	err := ctl.Errorf(syscall.EBUSY, "guest: sandbox %q is %s; need running", g.sb.ID(), st)
	if !st.Ended() || g.sb.Err() == "" {
		g.sb.Fail("guest", err)
	}
	return err
}

// refused explains a refusal by the agent (ninep.Options.Refused): errno
// and a text naming where, for procs/ ctl writes the agent's own err
// text; it is recorded in the sandbox's err.
func (g *guestLink) refused(ctx context.Context, op, path string, h sfs.Handle, en syscall.Errno) error {
	where := op + " " + path
	text := ""
	if op == "write" {
		where = path
		if names := strings.Split(path, "/"); names[0] == "procs" {
			slot := ""
			switch {
			case path == "procs/clone":
				slot = slotOf(ctx, h)
				where = "procs/" + slot + "/ctl"
			case len(names) == 3 && names[2] == "ctl":
				slot = names[1]
			}
			if slot != "" && slot != "?" {
				text = g.errText(ctx, slot)
			}
			if text == "" {
				text = en.Error()
			}
		}
		if path == agentWatch {
			text, _ = g.readLine(ctx, "err", 4096) // the agent's text of the refused watch message
		}
	}
	e := ctl.GuestError(en, where, text)
	g.sb.Fail(where, e)
	return e
}

// slotOf reads the slot number of an open procs/clone ("?" if it cannot).
func slotOf(ctx context.Context, h sfs.Handle) string {
	n, err := readSlot(ctx, h)
	if err != nil {
		return "?"
	}
	return n
}

// readSlot reads the slot number of an open procs/clone, "n\n" from the
// agent; anything but a decimal number is a ninep.ErrBadReply (it
// becomes a path element and a word of execstatus).
func readSlot(ctx context.Context, h sfs.Handle) (string, error) {
	b := make([]byte, 32)
	k, err := h.Read(ctx, b, 0)
	if err != nil {
		return "", err
	}
	n := strings.TrimSpace(string(b[:k]))
	if _, perr := strconv.ParseUint(n, 10, 32); perr != nil {
		return "", fmt.Errorf("%w: procs/clone: slot %s is not a number", ninep.ErrBadReply, strconv.Quote(guestText(b[:k])))
	}
	return n, nil
}

// readLine returns the first max bytes of the agent's file at path as
// one line of text (guestText).
func (g *guestLink) readLine(ctx context.Context, path string, max int) (string, error) {
	h, err := sfs.Open(ctx, g.r.File(path), sfs.ReadOnly)
	if err != nil {
		return "", err
	}
	defer h.Close()
	b := make([]byte, max)
	k, err := h.Read(ctx, b, 0)
	if err != nil {
		return "", err
	}
	return guestText(b[:k]), nil
}

// errText returns the agent's err text of slot n ("" if none or
// unreadable), used to explain a failed ctl write.
func (g *guestLink) errText(ctx context.Context, n string) string {
	text, err := g.readLine(ctx, "procs/"+n+"/err", 4096)
	if err != nil {
		return ""
	}
	return text
}
