package fusefs

import (
	"sync"

	sfs "sandfs/fs"
)

// seat is what one inode number serves now: the tree node a lookup last
// found under that number, and the path it was found at. Every go-fuse
// inode made for the number shares the number's seat. go-fuse answers a
// lookup with the inode it already has for a StableAttr (rawBridge
// addNewNode keeps the first and drops the one the lookup made), so a
// lookup cannot hand the kernel's inode what it found; it sets the seat
// instead, and whichever inode serves the number serves that.
type seat struct {
	mu   sync.Mutex
	path string   // in the tree (one of its names); a rename moves it (node.follow)
	ch   sfs.Chan // the node last found
	gen  uint64   // counts sets, so a Getattr keeps what it stated only if no lookup came meanwhile
}

// get returns what the seat serves and its gen.
func (s *seat) get() (sfs.Chan, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch, s.gen
}

// set gives the seat what a lookup found at path p.
func (s *seat) set(p string, c sfs.Chan) {
	s.mu.Lock()
	s.path, s.ch = p, c
	s.gen++
	s.mu.Unlock()
}

// move gives the seat its path after a rename and returns what it serves.
func (s *seat) move(p string) sfs.Chan {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.path = p
	return s.ch
}

// restated keeps c, the seat's node stated again, if no set came since
// gen.
func (s *seat) restated(c sfs.Chan, gen uint64) {
	s.mu.Lock()
	if s.gen == gen {
		s.ch = c
	}
	s.mu.Unlock()
}

// seatOf returns inode number ino's seat, made if it has none.
func (m *Mount) seatOf(ino uint64) *seat {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.seats[ino]
	if s == nil {
		s = &seat{}
		m.seats[ino] = s
	}
	return s
}
