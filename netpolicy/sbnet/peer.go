package sbnet

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// An exposed port's listener is on the host's loopback, which every
// local user can reach; only the sandbox's owner, root and the daemon's
// own uid may use it. TCP has no SO_PEERCRED, so the listener asks the
// kernel who owns the connecting socket: one exact sock_diag request
// (linux/inet_diag.h; net/ipv4/inet_diag.c, inet_diag_find_one_icsk)
// for the client's end of the accepted connection, found by its four
// addresses. Laid out as the kernel's:
//
//	struct inet_diag_req_v2 (56 bytes)     struct inet_diag_msg (72 bytes)
//	 0 family protocol ext pad              0 family state timer retrans
//	 4 states (u32)                          4 inet_diag_sockid (48 bytes)
//	 8 inet_diag_sockid:                    52 expires rqueue wqueue (u32 each)
//	    8 sport dport (be16)                 64 uid (u32)
//	   12 src[16]  28 dst[16] (network order)  68 inode (u32)
//	   44 if (u32)  48 cookie[2] (u32)
//
// A kernel without sock_diag's TCP handler (CONFIG_INET_TCP_DIAG; the
// lab's has none) answers ENOENT for every socket, the first
// connection's own end included: then the client's line of
// /proc/thread-self/net/tcp (the same uid and inode; the thread's
// namespace, which is the listener's) decides, at a cost that grows
// with the number of sockets on the host.
//
// The request is built here, not with vishvananda/netlink's SocketGet:
// v1.3.1's sends NLM_F_DUMP, under which the kernel matches the ports
// alone (inet_diag_dump_icsk), so it can answer with another socket of
// the same ports, another user's (TestPeerDiagExact).
//
// A socket its owner has closed (orphaned in FIN_WAIT, or a TIME_WAIT
// mini-socket) reports inode 0, and a mini-socket uid 0: "root". So a
// peer without an inode is refused (else anyone could connect, write a
// request and close before the lookup, and be taken for root).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	diagReqLen       = 56 // sizeof(struct inet_diag_req_v2)
	diagMsgLen       = 72 // sizeof(struct inet_diag_msg)
	diagNoCookie     = ^uint32(0)
)

// peerOwner is the uid owning the socket at the other end of c, an
// accepted TCP connection over IPv4; ok is false when no open socket is
// there (closed, or another namespace's).
func peerOwner(c net.Conn) (uid uint32, ok bool, err error) {
	peer, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || peer.IP.To4() == nil || local.IP.To4() == nil {
		return 0, false, fmt.Errorf("peer: not a TCP/IPv4 connection: %v", c.RemoteAddr())
	}
	diag.once.Do(func() {
		// c's own end exists: not found, the kernel has no handler.
		_, found, err := peerDiag(local, peer)
		diag.ok = err == nil && found
	})
	if !diag.ok {
		return peerProc(peer, local)
	}
	return peerDiag(peer, local)
}

// diag says whether sock_diag finds TCP sockets here (decided once, by
// the first connection's own end).
var diag struct {
	once sync.Once
	ok   bool
}

// peerDiag looks the client's end (source peer, destination local) up
// with sock_diag; not ok when the kernel knows no such socket.
func peerDiag(peer, local *net.TCPAddr) (uid uint32, ok bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, false, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	be, le := binary.BigEndian, binary.NativeEndian
	req := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
	le.PutUint32(req[0:], uint32(len(req)))
	le.PutUint16(req[4:], sockDiagByFamily)
	le.PutUint16(req[6:], unix.NLM_F_REQUEST) // no NLM_F_DUMP: the exact lookup
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = unix.AF_INET, unix.IPPROTO_TCP
	le.PutUint32(r[4:], ^uint32(0)) // every state
	// The socket wanted is the client's: its source is the peer.
	be.PutUint16(r[8:], uint16(peer.Port))
	be.PutUint16(r[10:], uint16(local.Port))
	copy(r[12:], peer.IP.To4())
	copy(r[28:], local.IP.To4())
	le.PutUint32(r[48:], diagNoCookie)
	le.PutUint32(r[52:], diagNoCookie)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false, os.NewSyscallError("sock_diag send", err)
	}
	b := make([]byte, 1024)
	k, _, err := unix.Recvfrom(fd, b, 0)
	if err != nil {
		return 0, false, os.NewSyscallError("sock_diag recv", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(b[:k])
	if err != nil || len(msgs) == 0 {
		return 0, false, fmt.Errorf("sock_diag: bad reply (%d bytes): %v", k, err)
	}
	m := msgs[0]
	switch {
	case m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4:
		if e := syscall.Errno(-int32(le.Uint32(m.Data))); e != 0 && e != unix.ENOENT {
			return 0, false, os.NewSyscallError("sock_diag", e)
		}
		return 0, false, nil // no such socket
	case m.Header.Type != sockDiagByFamily || len(m.Data) < diagMsgLen:
		return 0, false, fmt.Errorf("sock_diag: reply of type %d, %d bytes", m.Header.Type, len(m.Data))
	}
	uid, inode := le.Uint32(m.Data[64:]), le.Uint32(m.Data[68:])
	return uid, inode != 0, nil
}

// peerProc looks the client's end (source peer, destination local) up
// in /proc/thread-self/net/tcp, whose lines are (net/ipv4/tcp_ipv4.c,
// get_tcp4_sock; addresses are the __be32 printed as a host u32):
//
//	sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
//	0: 0100007F:A1B2 0100007F:1F40 01 00000000:00000000 00:00000000 00000000 1000 0 40123 ...
func peerProc(peer, local *net.TCPAddr) (uid uint32, ok bool, err error) {
	addr := func(a *net.TCPAddr) string {
		return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(a.IP.To4()), a.Port)
	}
	src, dst := addr(peer), addr(local)
	f, err := os.Open("/proc/thread-self/net/tcp")
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || fl[1] != src || fl[2] != dst {
			continue
		}
		u, err1 := strconv.ParseUint(fl[7], 10, 32)
		ino, err2 := strconv.ParseUint(fl[9], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false, fmt.Errorf("/proc/net/tcp: bad line %q", sc.Text())
		}
		return uint32(u), ino != 0, nil
	}
	return 0, false, sc.Err()
}

// mayUse reports whether the socket at the other end of c belongs to
// owner, root or the daemon's own uid (the E2B adapter's connections).
func mayUse(c net.Conn, owner uint32) (bool, error) {
	uid, ok, err := peerOwner(c)
	if err != nil || !ok {
		return false, err
	}
	return uid == owner || uid == 0 || uid == uint32(os.Geteuid()), nil
}
