package ninep

import (
	"fmt"
	"sync/atomic"

	"sandfs/ctl/cred"
)

// A local user may open any number of connections to the daemon's
// socket, each with its own bounds; so the connections a Server serves
// for one unprivileged identity from its socket (ServeConn: SO_PEERCRED,
// or nobody) also share one budget of defaultFids fids and defaultOpens
// open fids, checked beside each connection's own. Connections the
// caller vouches for (ServeConnAs: a guest's world, a guest agent) have
// only their own bounds, so that one guest cannot spend what its
// owner's other sandboxes hold; privileged clients (root, the daemon's
// user, a token) are not counted either.

// userBudget is what one identity's connections hold together.
type userBudget struct {
	uid         uint32
	fids, opens atomic.Int64
	conns       int // connections sharing it; Server.budgetMu
}

// joinBudget gives c, a connection of who, its identity's budget.
func (s *Server) joinBudget(c *conn, who cred.Cred) {
	if who.Privileged() {
		return
	}
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	b := s.budgets[who.UID]
	if b == nil {
		b = &userBudget{uid: who.UID}
		s.budgets[who.UID] = b
	}
	b.conns++
	c.budget = b
}

// leaveBudget takes what c holds out of its budget when it ends.
func (s *Server) leaveBudget(c *conn) {
	b := c.budget
	if b == nil {
		return
	}
	c.mu.Lock()
	b.fids.Add(-int64(c.counted.fids))
	b.opens.Add(-int64(c.counted.opens))
	c.counted = heldCounts{}
	c.mu.Unlock()
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	if b.conns--; b.conns == 0 {
		delete(s.budgets, b.uid)
	}
}

// heldCounts is what a connection holds against the bounds.
type heldCounts struct{ fids, opens int }

// heldLocked counts what c holds: its fids, made or being made, and
// its open fids, opened or being opened. Called with c.mu held.
func (c *conn) heldLocked() heldCounts {
	return heldCounts{
		fids:  len(c.fidPaths) + len(c.walks) + len(c.attaches),
		opens: len(c.bounds.open) + len(c.bounds.opening),
	}
}

// recountLocked brings c's share of its budget up to date after a
// change of what it holds. Called with c.mu held.
func (c *conn) recountLocked() {
	if c.budget == nil {
		return
	}
	now := c.heldLocked()
	c.budget.fids.Add(int64(now.fids - c.counted.fids))
	c.budget.opens.Add(int64(now.opens - c.counted.opens))
	c.counted = now
}

// budgetRoomLocked reports whether c's identity's connections may take
// one more fid (open false) or open fid; if not, it records the refusal.
// Concurrent requests on several connections may pass it together, so
// the budget may be overrun by at most one request per connection.
func (c *conn) budgetRoomLocked(tag uint16, open bool) bool {
	if c.budget == nil {
		return true
	}
	held, limit, what := c.budget.fids.Load(), c.lim.fids, "fids"
	if open {
		held, limit, what = c.budget.opens.Load(), c.lim.opens, "open fids"
	}
	if held < int64(limit) {
		return true
	}
	c.refuseLocked(tag, what, fmt.Sprintf("uid %d's connections", c.budget.uid), int(held), limit)
	return false
}
