package ninep

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// conn is one client connection: its context (which carries the
// client's identity, cred.Cred: see identity), its access rule and what
// its frames told us (fid paths, pending reads), used to end blocked
// reads when the client flushes or clunks them.
//
// fidPaths mirrors p9's fid table: a request that may create a fid
// (Tattach, Twalk) is noted by tag, and the fid is recorded only when
// p9's reply says it succeeded. So an anonymous client, which p9 gives no
// fid, leaves nothing here, and failed walks leave nothing either.
type conn struct {
	srv      *Server
	lim      *limits
	ctx      context.Context // ends with the connection; carries the client's cred.Cred
	cancel   context.CancelFunc
	token    string
	tokenSum [sha256.Size]byte // sha256 of token, for the constant-time check
	remote   string
	authed   atomic.Bool // set by the first successful attach
	release  func()      // gives back the listener's slot for an unattached connection

	mu        sync.Mutex
	lastAname string                               // aname of the latest Tattach; protected by mu
	fidPaths  map[uint32]string                    // fid -> tree path, of fids p9 holds; protected by mu
	attaches  map[uint16]uint32                    // tag -> fid of a Tattach in progress; protected by mu
	walks     map[uint16]pendingWalk               // tag -> a Twalk in progress; protected by mu
	readFids  map[uint16]uint32                    // tag -> fid of a Tread in progress; protected by mu
	blocked   map[string]map[*blockedRead]struct{} // path -> reads in progress; protected by mu
	// A Tread (or Twrite) between its frame and its handler's startRead,
	// by tag: its path, and whether a flush or clunk came meanwhile (the
	// read is then interrupted as soon as it starts). p9 hands a request
	// to its handler on another goroutine, so a clunk right after a read
	// can be seen before that read has registered. Protected by mu.
	unstarted map[uint16]*unstartedRead
	flushes   flushOrder // Rflush after the flushed request's reply (flushorder.go); protected by mu
}

// unstartedRead is a read seen on the wire whose handler has not started.
type unstartedRead struct {
	path string
	owed bool // interrupt it when it starts
}

// pendingWalk is a Twalk between request and reply: the fid it creates
// and that fid's tree path if it succeeds.
type pendingWalk struct {
	newfid uint32
	path   string
}

// blockedRead is one ReadAt in progress.
type blockedRead struct{ cancel context.CancelFunc }

// newConn returns the state of connection c, whose client is who.
// release, if not nil, gives back c's admission slot; it is called at the
// first attach or when the connection ends, whichever comes first.
func newConn(ctx context.Context, s *Server, c net.Conn, token string, who cred.Cred, release func()) *conn {
	if release == nil {
		release = func() {}
	}
	cn := &conn{
		srv:       s,
		lim:       &s.lim,
		token:     token,
		tokenSum:  sha256.Sum256([]byte(token)),
		remote:    c.RemoteAddr().String(),
		release:   release,
		fidPaths:  map[uint32]string{},
		attaches:  map[uint16]uint32{},
		walks:     map[uint16]pendingWalk{},
		readFids:  map[uint16]uint32{},
		blocked:   map[string]map[*blockedRead]struct{}{},
		unstarted: map[uint16]*unstartedRead{},
		flushes:   newFlushOrder(),
	}
	cn.ctx, cn.cancel = context.WithCancel(cred.With(ctx, who))
	return cn
}

// tokenIs reports whether name is the token, in time independent of
// where they differ (both are hashed first, so not even the length shows).
func (c *conn) tokenIs(name string) bool {
	sum := sha256.Sum256([]byte(name))
	return subtle.ConstantTimeCompare(sum[:], c.tokenSum[:]) == 1
}

// authenticated marks the connection attached: the limits for anonymous
// clients no longer apply and its admission slot is given back.
func (c *conn) authenticated() {
	if c.authed.CompareAndSwap(false, true) {
		c.release()
	}
}

// refuse logs why the connection is being closed and returns err, for
// the frame reader to end the connection with.
func (c *conn) refuse(err error) error {
	c.srv.log.Warn("9p: connection closed", "remote", c.remote, "attached", c.authed.Load(), "reason", err.Error())
	return err
}

// Attach implements p9.Attacher.Attach. The p9 server then walks the
// attach name from the returned file: with a token, that file is a gate
// whose only child is the token. The uname and uid a Tattach names are
// ignored: the client is who its connection says (identity).
func (c *conn) Attach() (p9.File, error) {
	c.mu.Lock()
	aname := c.lastAname
	c.mu.Unlock()
	rc, err := sfs.NewChan(c.ctx, c.srv.root, cred.Self().Owner())
	if err != nil {
		return nil, errno(err)
	}
	root := &file{c: c, ch: rc}
	if c.token == "" {
		c.authenticated()
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
	if c.claimUnstartedLocked(p) {
		c.cancelLaterLocked(p, []*blockedRead{b})
	}
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

// claimUnstartedLocked takes back the note of one seen read of path p
// whose handler is now starting, one that was interrupted before it
// started first, and says whether it was. Called with c.mu held.
func (c *conn) claimUnstartedLocked(p string) (owed bool) {
	var tag uint16
	found := false
	for t, u := range c.unstarted {
		if u.path == p && (!found || u.owed) {
			tag, found = t, true
			if u.owed {
				break
			}
		}
	}
	if !found {
		return false
	}
	owed = c.unstarted[tag].owed
	delete(c.unstarted, tag)
	return owed
}

// interruptLocked ends the reads of tree path p that are still in
// progress after interruptGrace, those not yet started included. Called
// with c.mu held.
func (c *conn) interruptLocked(p string) {
	for _, u := range c.unstarted {
		if u.path == p {
			u.owed = true
		}
	}
	var reads []*blockedRead
	for b := range c.blocked[p] {
		reads = append(reads, b)
	}
	c.cancelLaterLocked(p, reads)
}

// cancelLaterLocked cancels those of reads of path p still in progress
// after interruptGrace. Called with c.mu held.
func (c *conn) cancelLaterLocked(p string, reads []*blockedRead) {
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

func (c *conn) sawAttach(tag uint16, fid uint32, aname string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastAname = aname
	if _, busy := c.attaches[tag]; !busy {
		c.attaches[tag] = fid
	}
}

// sawWalk notes a walk from a fid p9 holds; p9 refuses the others.
func (c *conn) sawWalk(tag uint16, fid, newfid uint32, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.fidPaths[fid]
	if _, busy := c.walks[tag]; !ok || busy {
		return // p9 refuses a tag in use without a reply: keep the first
	}
	c.walks[tag] = pendingWalk{newfid: newfid, path: path.Join(append([]string{p}, names...)...)}
}

func (c *conn) sawRead(tag uint16, fid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readFids[tag] = fid
	if p, ok := c.fidPaths[fid]; ok {
		c.unstarted[tag] = &unstartedRead{path: p}
	}
}

func (c *conn) sawFlush(tag, oldtag uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushes.flush(tag, oldtag)
	fid, ok := c.readFids[oldtag]
	if !ok {
		return
	}
	if p, ok := c.fidPaths[fid]; ok {
		c.interruptLocked(p)
	}
}

// sawClunk interrupts the reads of the clunked fid's path if that fid
// has a read (or write) in progress: the clunk of a fid that was only
// walked, stated or read to its end (a lookup beside a blocked read of
// the same file) interrupts nothing.
func (c *conn) sawClunk(fid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.fidPaths[fid]; ok {
		for _, f := range c.readFids {
			if f == fid {
				c.interruptLocked(p)
				break
			}
		}
		delete(c.fidPaths, fid)
	}
}

// sawReply ends the request with this tag: the fid of a successful
// attach or walk is recorded (p9 replies Rattach or Rwalk exactly when
// it has created the fid, Rlerror otherwise).
// It says whether the reply is an Rflush to hold until the reply of the
// request it flushed is written (flushOrder).
func (c *conn) sawReply(typ uint8, tag uint16) (hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hold = c.flushes.reply(typ, tag)
	if fid, ok := c.attaches[tag]; ok {
		delete(c.attaches, tag)
		if typ == msgRattach {
			c.fidPaths[fid] = ""
		}
	}
	if w, ok := c.walks[tag]; ok {
		delete(c.walks, tag)
		if typ == msgRwalk || typ == msgRwalkgetattr {
			c.fidPaths[w.newfid] = w.path
		}
	}
	delete(c.readFids, tag)
	delete(c.unstarted, tag) // a read refused before its handler ran
	return hold
}
