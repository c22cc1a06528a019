package ctl

import (
	"context"
	"net"
	"strconv"
	"syscall"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// WorldPort is the host vsock port a guest connects to for its world:
// the daemon serves the world there (9P2000.L) and the agent mounts it
// at /workspace ("workspace <port>" on the agent's ctl).
const WorldPort = 565

// WorldTag is the mount tag of the VMM's virtio-9p device (vmm/virtio/p9),
// which carries 9P to the same socket as a guest's vsock connection to
// WorldPort; the agent mounts it at /workspace when it is there
// (guest.WorkspaceTag, the same string).
const WorldTag = "sandfs-world"

// GuestListener is optionally implemented by a Machine whose guest can
// connect to the host: ListenGuest returns a listener for the guest's
// connections to host vsock port port. Closing it stops listening.
type GuestListener interface {
	ListenGuest(port uint32) (net.Listener, error)
}

// attachWorld serves s's world (if any) to m's guest and has its agent
// mount it at /workspace. The world's connections are served as the
// sandbox's owner; the listener closes when the machine ends. A machine
// that takes no guest connections (the unit tests' fakes), or a plane
// without world data (no WorldOpener), gets no /workspace.
func (s *Sandbox) attachWorld(ctx context.Context, m Machine) error {
	s.p.wr.mu.Lock()
	delete(s.p.wr.lost, s)
	s.p.wr.mu.Unlock()
	name := s.Config().World
	gl, ok := m.(GuestListener)
	if name == "" || !ok {
		return nil
	}
	b, err := s.p.World(name)
	if Errno(err) == syscall.ENODEV {
		return nil
	}
	if err != nil {
		return err
	}
	l, err := gl.ListenGuest(WorldPort)
	if err != nil {
		return Errorf(syscall.EIO, "world: listen: %v", err)
	}
	who := cred.Cred{UID: s.owner.UID, GID: s.owner.GID}
	log := s.p.log.With("sandbox", s.id, "world", name)
	go func() { <-m.Done(); l.Close() }()
	go serveGuestConns(l, maxWorldConns, func(c net.Conn) {
		growSendBuffer(c)
		b.ServeConn(s.p.ctx, c, who, log)
	})
	return msg.Prefix("world", agentSay(ctx, m, "workspace "+strconv.Itoa(WorldPort)))
}

// maxWorldConns bounds a guest's connections to its world at a time (its
// agent mounts /workspace once): each costs the daemon a 9P session.
const maxWorldConns = 4

// serveGuestConns serves each connection accepted on l with serve, at
// most max at a time: one over that is closed at once (a guest must not
// grow the daemon's connections without bound). It returns when l closes.
func serveGuestConns(l net.Listener, max int, serve func(net.Conn)) {
	slots := make(chan struct{}, max)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
			go func() {
				defer func() { <-slots }()
				serve(c)
			}()
		default:
			c.Close()
		}
	}
}

// agentSay writes one message to the agent's ctl of m's guest.
func agentSay(ctx context.Context, m Machine, message string) error {
	d, ok := m.(GuestDialer)
	if !ok {
		return Errorf(syscall.ENOTSUP, "the machine has no guest agent")
	}
	ctx, cancel := context.WithTimeout(ctx, agentWait)
	defer cancel()
	c, err := d.DialGuest(ctx, hybrid.AgentPort)
	if err != nil {
		return Errorf(Errno(err), "agent: %v", err)
	}
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	cl, err := p9.NewClient(c, p9.WithMessageSize(agentMsize))
	if err != nil {
		c.Close()
		return Errorf(syscall.EIO, "agent: %v", err)
	}
	// Closing the session frees its fids: no clunks, each a round trip.
	defer cl.Close()
	root, err := cl.Attach("/")
	if err != nil {
		return Errorf(Errno(err), "agent: %v", err)
	}
	_, f, err := root.Walk([]string{"ctl"})
	if err != nil {
		return Errorf(Errno(err), "agent: %v", err)
	}
	if _, _, err := f.Open(p9.WriteOnly); err != nil {
		return Errorf(Errno(err), "agent: %v", err)
	}
	if _, err := f.WriteAt([]byte(message), 0); err != nil {
		return Errorf(Errno(err), "agent: %v", err)
	}
	return nil
}
