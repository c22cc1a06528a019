package ninep

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"path"
	"sync"
	"sync/atomic"

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
	authed   atomic.Bool   // set by the first successful attach
	unix     *net.UnixConn // the connection, if a unix socket (passed reads)
	passOn   atomic.Bool   // the client asked for passed reads and may have them (passread.go)
	orderOn  atomic.Bool   // the client asked for ordered clunks and has them (clunkorder.go)
	filesOn  atomic.Bool   // the client asked for passed files and may have them (passfile.go)
	release  func()        // gives back the listener's slot for an unattached connection

	mu        sync.Mutex
	lastAname string                 // aname of the latest Tattach; protected by mu
	fidPaths  map[uint32]string      // fid -> tree path, of fids p9 holds; protected by mu
	attaches  map[uint16]uint32      // tag -> fid of a Tattach in progress; protected by mu
	walks     map[uint16]pendingWalk // tag -> a Twalk in progress; protected by mu
	// reads are the Treads and Twrites between their frame and their
	// reply, by tag (inflight). Protected by mu.
	reads map[uint16]*inflight
	// xattrFids are the fids a Txattrcreate turned into an xattr being
	// written: p9 checks and uses their Twrites' offsets itself, so
	// those frames keep theirs. Protected by mu.
	xattrFids map[uint32]bool
	flushes   flushOrder  // Rflush after the flushed request's reply (flushorder.go); protected by mu
	bounds    fidBounds   // what counts against the fid and open bounds (fidlimit.go); protected by mu
	budget    *userBudget // shared with its user's other connections, or nil (budget.go); set before serving
	counted   heldCounts  // c's part of budget; protected by mu
	// clunkWait is closed when the reply for the Tclunk with clunkTag
	// is about to be written (ordered clunks, clunkorder.go). Protected by mu.
	clunkWait chan struct{}
	clunkTag  uint16
	// offers are the descriptors of opens whose replies are not sent
	// yet, by cookie (passfile.go). Protected by mu.
	offers   map[uint32]int
	offerSeq uint32
}

// inflight is one Tread or Twrite from its frame to its reply. p9 gives
// the handler (ReadAt, WriteAt) no tag, so the frame p9 decodes carries
// the tag in place of the offset (tagOffset) and the handler takes the
// client's offset back from here (begin): a flush or clunk so reaches
// exactly its request, begun or not, never another read of the same file.
type inflight struct {
	fid    uint32
	off    int64              // the offset the client sent
	begun  bool               // its handler has taken it (begin)
	cancel context.CancelFunc // ends a begun read's context; nil for a write that runs to its end
	owed   bool               // flushed or its fid clunked before it began: it begins interrupted
	pass   *passedRead        // a read whose reply passes a descriptor (passread.go)
}

// pendingWalk is a Twalk between request and reply: the fid it creates
// and that fid's tree path if it succeeds.
type pendingWalk struct {
	newfid uint32
	path   string
}

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
		reads:     map[uint16]*inflight{},
		xattrFids: map[uint32]bool{},
		flushes:   newFlushOrder(),
		bounds:    newFidBounds(),
		offers:    map[uint32]int{},
	}
	cn.unix, _ = c.(*net.UnixConn)
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
	root := &file{c: c, ch: rc, scope: rootScope(rc.Attr().Ino)}
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

// Offsets that stand for a tag in the frames p9 decodes (inflight):
// negative as int64, so no handler that missed the exchange could take
// one for a place in a file.
const (
	offsetTag    = uint64(1) << 63
	offsetTagBad = offsetTag | 1<<16 // a frame whose tag was in use: its handler refuses it
)

// begin is the start of a Tread's or Twrite's handler, which p9 gave
// off (tagOffset): it returns the client's offset and the request's
// context, which, for an interruptible request, ends when the client
// flushes the request or clunks its fid (at once if that came before
// the handler began) or the connection ends; done releases it. EINVAL
// for an offset that names no request in flight (a tag the client
// reused before its reply).
func (c *conn) begin(off int64, interruptible bool) (ctx context.Context, clientOff int64, done func(), err error) {
	u := uint64(off)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads[uint16(u)]
	if u&^0xffff != offsetTag || r == nil || r.begun {
		return nil, 0, nil, linux.EINVAL
	}
	r.begun = true
	if !interruptible {
		return c.ctx, r.off, func() {}, nil
	}
	ctx, cancel := context.WithCancel(c.ctx)
	if r.owed {
		c.srv.log.Debug("9p: request interrupted before it began", "remote", c.remote)
		cancel()
	}
	r.cancel = cancel
	return ctx, r.off, cancel, nil
}

// interruptLocked ends request r: at once if its handler has begun,
// else as it begins. Called with c.mu held.
func (c *conn) interruptLocked(r *inflight) {
	if !r.begun {
		r.owed = true
		return
	}
	if r.cancel != nil {
		c.srv.log.Debug("9p: request interrupted", "remote", c.remote)
		r.cancel()
	}
}

// The frame observers, called by frameReader for every incoming request
// before the p9 server sees it.

// sawAttach notes an attach; it reports false, and notes nothing, when
// the attach would take the connection past its fid bound (fidlimit.go).
func (c *conn) sawAttach(tag uint16, fid uint32, aname string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fidRoomLocked(tag, fid) {
		return false
	}
	c.lastAname = aname
	if _, busy := c.attaches[tag]; !busy {
		c.attaches[tag] = fid
	}
	c.recountLocked()
	return true
}

// sawWalk notes a walk from a fid p9 holds; p9 refuses the others. It
// reports false, and notes nothing, when the walk would take the
// connection past its fid bound.
func (c *conn) sawWalk(tag uint16, fid, newfid uint32, names []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.fidPaths[fid]
	if _, busy := c.walks[tag]; !ok || busy {
		return true // p9 refuses a tag in use without a reply: keep the first
	}
	if !c.fidRoomLocked(tag, newfid) {
		return false
	}
	c.walks[tag] = pendingWalk{newfid: newfid, path: path.Join(append([]string{p}, names...)...)}
	c.recountLocked()
	return true
}

// sawRead notes a Tread or Twrite of fid at offset off and returns the
// offset its frame is to carry instead (tagOffset).
func (c *conn) sawRead(tag uint16, fid uint32, off uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.xattrFids[fid] {
		return off
	}
	if _, busy := c.reads[tag]; busy {
		return offsetTagBad // p9 refuses a tag in use, or runs it after the first one's end
	}
	c.reads[tag] = &inflight{fid: fid, off: int64(off)}
	return offsetTag | uint64(tag)
}

func (c *conn) sawXattrCreate(fid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fidPaths[fid]; ok {
		c.xattrFids[fid] = true
	}
}

// sawFlush interrupts the request the flush names, only that one.
func (c *conn) sawFlush(tag, oldtag uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushes.flush(tag, oldtag)
	if r := c.reads[oldtag]; r != nil {
		c.interruptLocked(r)
	}
}

// sawClunk interrupts the reads (and blocking writes) in flight on the
// clunked fid; the clunk of another fid of the same file (a lookup
// beside a blocked read) interrupts nothing.
func (c *conn) sawClunk(fid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reads {
		if r.fid == fid {
			c.interruptLocked(r)
		}
	}
	delete(c.fidPaths, fid)
	delete(c.xattrFids, fid)
	delete(c.bounds.open, fid)
	c.recountLocked()
}

// sawReply ends the request with this tag: the fid of a successful
// attach or walk is recorded (p9 replies Rattach or Rwalk exactly when
// it has created the fid, Rlerror otherwise).
// It says whether the reply is an Rflush to hold until the reply of the
// request it flushed is written (flushOrder), and returns the passed
// read registered for the request, if any (passread.go), for the caller
// to send or close, and whether it is the Rlerror of a request refused
// for a bound, whose errno the caller makes EMFILE (fidlimit.go).
func (c *conn) sawReply(typ uint8, tag uint16) (hold bool, pass *passedRead, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hold = c.flushes.reply(typ, tag)
	if fid, ok := c.attaches[tag]; ok {
		delete(c.attaches, tag)
		if typ == msgRattach {
			c.fidPaths[fid] = ""
			delete(c.bounds.open, fid) // p9 put the new fid in its place
		}
	}
	if w, ok := c.walks[tag]; ok {
		delete(c.walks, tag)
		if typ == msgRwalk || typ == msgRwalkgetattr {
			c.fidPaths[w.newfid] = w.path
			delete(c.bounds.open, w.newfid)
		}
	}
	if r := c.reads[tag]; r != nil {
		pass = r.pass
	}
	delete(c.reads, tag) // begun or not (refused before its handler ran)
	refused = c.bounds.replied(typ, tag)
	c.clunkRepliedLocked(tag)
	c.recountLocked()
	return hold, pass, refused
}
