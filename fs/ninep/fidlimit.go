package ninep

import (
	"encoding/binary"

	"github.com/hugelgupf/p9/linux"
)

// An attached client is bounded in what it can make the server hold: a
// fid costs the daemon memory (its file, p9's reference and path node,
// the path recorded here: about half a KiB on the control tree) and an
// open fid costs it an open file as well (a world's union opens the
// layer's file for it). Unbounded, one guest walking and opening without
// end on its /workspace would take the daemon's memory or descriptors
// from every other sandbox. So each connection holds at most
//
//	defaultFids   fids, attached or walked      (about 0.5-0.7 GiB at the bound)
//	defaultOpens  of them open (Tlopen, Tlcreate)
//
// and a request that would take one more is refused with EMFILE ("too
// many open files"), which the Linux client passes to the caller's
// lookup or open; the connection and its other fids go on as before, and
// a clunk makes room again. The daemon's log says it, the first time on
// a connection and then every refusalLogEvery refusals, for each bound.
//
// Linux's v9fs keeps a fid for each dentry it caches, so a guest that has
// looked at N files of /workspace holds about N fids: defaultFids leaves
// room for a tree of a million files (a guest's own memory bounds its
// dentry cache near that: a few hundred bytes a dentry). Open files are
// the guest's open descriptors on /workspace, far fewer.
//
// The refusal is p9's own: the frame reader points the request at a fid
// that cannot exist (noFID as the walk's or open's fid, a Tattach's afid
// 0), which p9 refuses without calling the tree, and the reply writer
// turns that Rlerror's errno into EMFILE.
const (
	defaultFids     = 1 << 20
	defaultOpens    = 1 << 12
	refusalLogEvery = 1024
	noFID           = ^uint32(0)
)

// fidBounds is a connection's state for its bounds; the conn's mu guards it.
type fidBounds struct {
	open     map[uint32]bool   // fids p9 opened (Rlopen, Rlcreate), until clunked or replaced
	opening  map[uint16]uint32 // tag -> fid of a Tlopen or Tlcreate in progress
	refused  map[uint16]bool   // tags of requests refused for a bound, until their reply
	refusals map[string]int    // requests refused on this connection, by bound
}

func newFidBounds() fidBounds {
	return fidBounds{open: map[uint32]bool{}, opening: map[uint16]uint32{}, refused: map[uint16]bool{}, refusals: map[string]int{}}
}

// fidRoomLocked reports whether a request with tag may create (or
// replace) newfid; if not, it records the refusal. Called with c.mu held.
func (c *conn) fidRoomLocked(tag uint16, newfid uint32) bool {
	if _, ok := c.fidPaths[newfid]; ok {
		return true // replaces a fid it holds: no more than before
	}
	held := c.heldLocked().fids
	if held >= c.lim.fids {
		c.refuseLocked(tag, "fids", "", held, c.lim.fids)
		return false
	}
	return c.budgetRoomLocked(tag, false)
}

// sawOpen notes a Tlopen or Tlcreate of fid; it reports false, and notes
// nothing, when it would take the connection past its bound on open fids.
func (c *conn) sawOpen(tag uint16, fid uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &c.bounds
	if _, ok := c.fidPaths[fid]; !ok || b.open[fid] {
		return true // p9 refuses it: no fid, or one already open
	}
	if _, busy := b.opening[tag]; busy {
		return true // p9 refuses a tag in use
	}
	if held := c.heldLocked().opens; held >= c.lim.opens {
		c.refuseLocked(tag, "open fids", "", held, c.lim.opens)
		return false
	}
	if !c.budgetRoomLocked(tag, true) {
		return false
	}
	b.opening[tag] = fid
	c.recountLocked()
	return true
}

// refuseLocked records that the request with tag is refused for a bound
// (on what whose holds: the connection, "", or its user's connections) and
// logs it, the first time for its bound on the connection and then
// every refusalLogEvery times.
func (c *conn) refuseLocked(tag uint16, what, whose string, held, limit int) {
	b := &c.bounds
	b.refused[tag] = true
	key := whose + " " + what
	n := b.refusals[key]
	if n%refusalLogEvery == 0 {
		msg := "9p: request refused (EMFILE): the connection holds as many " + what + " as it may"
		if whose != "" {
			msg = "9p: request refused (EMFILE): " + whose + " hold as many " + what + " as they may"
		}
		c.srv.log.Warn(msg,
			"remote", c.remote, "held", held, "limit", limit, "refused", n+1)
	}
	b.refusals[key] = n + 1
}

// replied ends the bounds' record of the request with tag, whose reply
// is of type typ: an open fid is recorded on Rlopen or Rlcreate. It
// reports whether the reply is the Rlerror of a refused request.
func (b *fidBounds) replied(typ uint8, tag uint16) (refused bool) {
	if fid, ok := b.opening[tag]; ok {
		delete(b.opening, tag)
		if typ == msgRlopen || typ == msgRlcreate {
			b.open[fid] = true
		}
	}
	if b.refused[tag] {
		delete(b.refused, tag)
		return typ == msgRlerror
	}
	return false
}

// refuseFrame points a request the bounds refused at a fid p9 cannot
// find, so that p9 answers it with an Rlerror without touching the tree:
//
//	Twalk, Twalkgetattr  size[4] type[1] tag[2] fid[4] newfid[4] ...   fid := noFID
//	Tlopen, Tlcreate     size[4] type[1] tag[2] fid[4] ...             fid := noFID
//	Tattach              size[4] type[1] tag[2] fid[4] afid[4] ...     afid := 0 (p9: EINVAL)
func refuseFrame(frame []byte) {
	if frame[4] == msgTattach {
		binary.LittleEndian.PutUint32(frame[11:15], 0)
		return
	}
	binary.LittleEndian.PutUint32(frame[7:11], noFID)
}

// emfile makes the errno of an Rlerror reply (size[4] type[1] tag[2]
// ecode[4]) EMFILE.
func emfile(reply []byte) {
	if len(reply) == 11 && reply[4] == msgRlerror {
		binary.LittleEndian.PutUint32(reply[7:11], uint32(linux.EMFILE))
	}
}
