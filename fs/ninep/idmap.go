package ninep

import (
	"math"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/cred"
)

// IDMap is how a server shows owners to clients that have users of
// their own: a guest, whose /workspace should be its user's (uid 1000),
// whoever owns the sandbox on the host. Host, the ids the tree shows
// (the sandbox's owner's), is shown as Guest; any other id is shown as
// Overflow (65534, "nobody", as the kernel shows an id a user namespace
// does not map). The other way, a client's Guest ids mean Host's; any
// other id it names in a chown is refused (EPERM), and in a create is
// ignored (the file is the connection's, as for an unprivileged client).
// Mode bits are shown as they are. The zero map, the default, shows the
// tree's ids as they are.
type IDMap struct {
	Host  cred.Owner
	Guest cred.Owner
}

// Overflow is the id an IDMap shows for an id it does not map.
const Overflow = 65534

// SetIDMap makes the server show owners through m (nil: as they are),
// before it serves.
func (s *Server) SetIDMap(m *IDMap) { s.ids = m }

// out is owner o as the client sees it.
func (m *IDMap) out(o cred.Owner) (p9.UID, p9.GID) {
	if m == nil {
		return p9.UID(o.UID), p9.GID(o.GID)
	}
	u, g := p9.UID(Overflow), p9.GID(Overflow)
	if o.UID == m.Host.UID {
		u = p9.UID(m.Guest.UID)
	}
	if o.GID == m.Host.GID {
		g = p9.GID(m.Guest.GID)
	}
	return u, g
}

// uid is the tree's uid for the client's u; ok is false if m does not
// map it (the result is then unset). An unset u (NoUID) stays unset.
func (m *IDMap) uid(u p9.UID) (p9.UID, bool) {
	if m == nil {
		return u, true
	}
	id, ok := in(uint32(u), m.Guest.UID, m.Host.UID)
	return p9.UID(id), ok
}

// gid is uid's counterpart for group ids.
func (m *IDMap) gid(g p9.GID) (p9.GID, bool) {
	if m == nil {
		return g, true
	}
	id, ok := in(uint32(g), m.Guest.GID, m.Host.GID)
	return p9.GID(id), ok
}

// in maps a client's id: unset (NoUID and NoGID are both MaxUint32)
// stays unset, guest is host, anything else is unmapped (unset, false).
func in(id, guest, host uint32) (uint32, bool) {
	switch id {
	case math.MaxUint32:
		return id, true
	case guest:
		return host, true
	}
	return math.MaxUint32, false
}
