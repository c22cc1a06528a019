package ninep

import (
	"context"
	"net"
	"path"
	"sync"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

// conn is one client connection: its context, its access rule and what
// its frames told us (fid paths, pending reads), used to end blocked
// reads when the client flushes or clunks them.
type conn struct {
	srv    *Server
	ctx    context.Context // ends with the connection
	cancel context.CancelFunc
	token  string
	remote string

	mu        sync.Mutex
	lastAname string                               // aname of the latest Tattach; protected by mu
	fidPaths  map[uint32]string                    // fid -> tree path, from Tattach/Twalk; protected by mu
	readFids  map[uint16]uint32                    // tag -> fid of a Tread; protected by mu
	blocked   map[string]map[*blockedRead]struct{} // path -> reads in progress; protected by mu
}

// blockedRead is one ReadAt in progress.
type blockedRead struct{ cancel context.CancelFunc }

func newConn(ctx context.Context, s *Server, c net.Conn, token string) *conn {
	cn := &conn{
		srv:      s,
		token:    token,
		remote:   c.RemoteAddr().String(),
		fidPaths: map[uint32]string{},
		readFids: map[uint16]uint32{},
		blocked:  map[string]map[*blockedRead]struct{}{},
	}
	cn.ctx, cn.cancel = context.WithCancel(ctx)
	return cn
}

// Attach implements p9.Attacher.Attach. The p9 server then walks the
// attach name from the returned file: with a token, that file is a gate
// whose only child is the token.
func (c *conn) Attach() (p9.File, error) {
	c.mu.Lock()
	aname := c.lastAname
	c.mu.Unlock()
	root := &file{c: c, node: c.srv.root}
	if c.token == "" {
		return root, nil
	}
	if aname == "" || aname == "/" {
		c.srv.log.Warn("9p: attach refused: no token", "remote", c.remote)
		return nil, linux.EPERM
	}
	return &gate{c: c, root: root}, nil
}

// startRead registers a read on tree path p and returns its context, which
// ends when the connection ends or the client flushes or clunks the read.
func (c *conn) startRead(p string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(c.ctx)
	b := &blockedRead{cancel: cancel}
	c.mu.Lock()
	m := c.blocked[p]
	if m == nil {
		m = map[*blockedRead]struct{}{}
		c.blocked[p] = m
	}
	m[b] = struct{}{}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(m, b)
		if len(m) == 0 && c.blocked[p] != nil && len(c.blocked[p]) == 0 {
			delete(c.blocked, p)
		}
		c.mu.Unlock()
		cancel()
	}
}

// interruptGrace is how long a read may still be running after its fid
// was flushed or clunked before it is cancelled: ordinary reads of the
// same path by other fids finish well within it, blocked ones do not.
const interruptGrace = 20 * time.Millisecond

// interruptLocked ends the reads of tree path p that are still in
// progress after interruptGrace. Called with c.mu held.
func (c *conn) interruptLocked(p string) {
	var reads []*blockedRead
	for b := range c.blocked[p] {
		reads = append(reads, b)
	}
	if len(reads) == 0 {
		return
	}
	time.AfterFunc(interruptGrace, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, b := range reads {
			if _, ok := c.blocked[p][b]; ok {
				c.srv.log.Debug("9p: read interrupted", "path", p, "remote", c.remote)
				b.cancel()
			}
		}
	})
}

// The frame observers, called by frameReader for every incoming request
// before the p9 server sees it.

func (c *conn) sawAttach(fid uint32, aname string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastAname = aname
	c.fidPaths[fid] = ""
}

func (c *conn) sawWalk(fid, newfid uint32, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.fidPaths[fid]
	c.fidPaths[newfid] = path.Join(append([]string{p}, names...)...)
}

func (c *conn) sawRead(tag uint16, fid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readFids[tag] = fid
}

func (c *conn) sawFlush(oldtag uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fid, ok := c.readFids[oldtag]
	if !ok {
		return
	}
	if p, ok := c.fidPaths[fid]; ok {
		c.interruptLocked(p)
	}
}

func (c *conn) sawClunk(fid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.fidPaths[fid]; ok {
		c.interruptLocked(p)
		delete(c.fidPaths, fid)
	}
}
