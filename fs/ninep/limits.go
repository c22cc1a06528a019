package ninep

import (
	"net"
	"sync"
	"time"
)

// maxMsize is the largest 9P message size the server agrees to: a
// Tversion asking for more is answered with this (the frame reader
// rewrites its msize before p9 sees it, since p9 v0.3.0 allocates a
// buffer of the agreed size at every Tversion). Our clients ask for at
// most 256 KiB (fs/client); Linux's v9fs takes the smaller size it is
// given back.
const maxMsize = 512 << 10

// limits bound what a connection may cost before it has attached, that
// is before it has shown the token (or, on a listener without a token,
// before its first attach). Until then the client is anonymous: it may
// send only Tversion, Tauth, Tattach, Tflush and Tclunk, in few small
// frames, within a fixed time, and a listener holds only so many such
// connections. No fid is recorded for it (conn.fidPaths fills from
// replies, and p9 creates a fid only on a successful attach).
type limits struct {
	preAuthFrame  uint32        // largest frame before attach, size field included
	preAuthFrames int           // frames a connection may send before attach
	authTimeout   time.Duration // from accept to a successful attach
	perHost       int           // unattached connections per remote host, per listener
	total         int           // unattached connections per listener
	fids          int           // fids an attached connection may hold (fidlimit.go)
	opens         int           // of them open at a time (each an open file of the daemon's)
}

// defaultLimits: a Linux or p9 client sends Tversion and Tattach, each
// well under 8 KiB, right after connecting.
var defaultLimits = limits{
	preAuthFrame:  8 << 10,
	preAuthFrames: 16,
	authTimeout:   10 * time.Second,
	perHost:       8,
	total:         64,
	fids:          defaultFids,
	opens:         defaultOpens,
}

// preAuthType reports whether a request of type t may come before attach.
func preAuthType(t uint8) bool {
	switch t {
	case msgTversion, msgTauth, msgTattach, msgTflush, msgTclunk:
		return true
	}
	return false
}

// admission counts one listener's unattached connections, per remote
// host and in total. A connection holds its slot from accept until it
// attaches or ends.
type admission struct {
	lim *limits

	mu      sync.Mutex
	total   int            // unattached connections; protected by mu
	perHost map[string]int // host -> unattached connections; protected by mu
	refused int            // refused since lastLog; protected by mu
	lastLog time.Time      // last "refusing connections" log line; protected by mu
}

func newAdmission(lim *limits) *admission {
	return &admission{lim: lim, perHost: map[string]int{}}
}

// acquire takes a slot for a connection from addr. It returns the
// function that gives the slot back (idempotent), or ok false when the
// listener already holds its limit of unattached connections, overall
// or from addr's host; logRefusal is non-zero when the caller should
// log a refusal now: at most once a second, with how many were refused.
func (a *admission) acquire(addr net.Addr) (release func(), ok bool, logRefusal int) {
	host := hostKey(addr)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total >= a.lim.total || (host != "" && a.perHost[host] >= a.lim.perHost) {
		a.refused++
		if now := time.Now(); now.Sub(a.lastLog) >= time.Second {
			logRefusal, a.refused, a.lastLog = a.refused, 0, now
		}
		return nil, false, logRefusal
	}
	a.total++
	if host != "" {
		a.perHost[host]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.total--
			if host != "" {
				if a.perHost[host]--; a.perHost[host] == 0 {
					delete(a.perHost, host)
				}
			}
		})
	}, true, 0
}

// hostKey names the remote host of a TCP connection for the per-host
// count: its IPv4 address, or the /64 of an IPv6 one (one host usually
// holds a whole /64). Other connections (unix sockets) have no host and
// count only in the total.
func hostKey(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String()
}
