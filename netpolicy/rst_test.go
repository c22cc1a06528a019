package netpolicy

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestResetPacket checks the program's RST byte by byte, as captured on
// the guest's side of the veth: addresses and ports swapped, RST|ACK
// with ack = the SYN's seq + 1, and IPv4 header and TCP checksums that
// verify (computed here independently of the C code).
func TestResetPacket(t *testing.T) {
	tp := newTopo(t, &Policy{})
	for _, dst := range []string{"10.99.2.1", "fd99:2::1"} {
		var frames [][]byte
		must(t, in(tp.guest, func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			g0, err := tp.guestLink()
			if err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: g0}); err != nil {
				return err
			}
			if err := tp.dial(dst); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("tcp %s: %v; want ECONNREFUSED", dst, err)
			}
			// The RST reached the stack, so it is queued here already.
			for {
				b := make([]byte, 2048)
				n, _, err := unix.Recvfrom(fd, b, unix.MSG_DONTWAIT)
				if err != nil {
					return nil
				}
				frames = append(frames, b[:n])
			}
		}))
		checkReset(t, dst, frames)
	}
}

func (tp *topo) guestLink() (int, error) {
	h, err := netlinkAt(tp.guest)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	l, err := h.LinkByName("g0")
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// tcpSeg is the part of a captured frame the check needs.
type tcpSeg struct {
	src, dst     netip.Addr
	sport, dport uint16
	seq, ack     uint32
	flags        byte
	ipOK, tcpOK  bool
}

// checkReset finds the SYN to dst and the RST from dst among frames.
func checkReset(t *testing.T, dst string, frames [][]byte) {
	t.Helper()
	var syn, rst *tcpSeg
	for _, f := range frames {
		s := parseSeg(f)
		if s == nil {
			continue
		}
		switch {
		case s.dst.String() == dst && s.flags&0x02 != 0:
			syn = s
		case s.src.String() == dst && s.flags&0x04 != 0:
			rst = s
		}
	}
	if syn == nil || rst == nil {
		t.Fatalf("%s: captured SYN %v, RST %v in %d frames; want both", dst, syn, rst, len(frames))
	}
	if rst.dst != syn.src || rst.sport != syn.dport || rst.dport != syn.sport {
		t.Errorf("%s: RST %+v does not answer SYN %+v", dst, rst, syn)
	}
	if rst.flags != 0x14 || rst.ack != syn.seq+1 {
		t.Errorf("%s: RST flags %#x ack %d; want RST|ACK (0x14) ack %d", dst, rst.flags, rst.ack, syn.seq+1)
	}
	if !rst.ipOK || !rst.tcpOK {
		t.Errorf("%s: RST checksums: ip %v tcp %v; want both valid", dst, rst.ipOK, rst.tcpOK)
	}
}

// parseSeg parses an Ethernet frame holding IPv4 (no options) or IPv6
// (no extension headers) and TCP; nil for anything else.
func parseSeg(f []byte) *tcpSeg {
	if len(f) < 14 {
		return nil
	}
	var s tcpSeg
	var pseudo []byte
	var l4 []byte
	switch binary.BigEndian.Uint16(f[12:]) {
	case unix.ETH_P_IP:
		ip := f[14:]
		if len(ip) < 20 || ip[0] != 0x45 || ip[9] != unix.IPPROTO_TCP {
			return nil
		}
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total > len(ip) || total < 40 {
			return nil
		}
		s.src, _ = netip.AddrFromSlice(ip[12:16])
		s.dst, _ = netip.AddrFromSlice(ip[16:20])
		s.ipOK = csum(ip[:20], 0) == 0
		l4 = ip[20:total]
		pseudo = append(append(append([]byte{}, ip[12:20]...), 0, unix.IPPROTO_TCP), byte(len(l4)>>8), byte(len(l4)))
	case unix.ETH_P_IPV6:
		ip := f[14:]
		if len(ip) < 60 || ip[6] != unix.IPPROTO_TCP {
			return nil
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if 40+plen > len(ip) {
			return nil
		}
		s.src, _ = netip.AddrFromSlice(ip[8:24])
		s.dst, _ = netip.AddrFromSlice(ip[24:40])
		s.ipOK = true
		l4 = ip[40 : 40+plen]
		pseudo = append(append([]byte{}, ip[8:40]...), 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, unix.IPPROTO_TCP)
	default:
		return nil
	}
	if len(l4) < 20 {
		return nil
	}
	s.sport = binary.BigEndian.Uint16(l4[0:])
	s.dport = binary.BigEndian.Uint16(l4[2:])
	s.seq = binary.BigEndian.Uint32(l4[4:])
	s.ack = binary.BigEndian.Uint32(l4[8:])
	s.flags = l4[13]
	s.tcpOK = csum(l4, sum(pseudo)) == 0
	return &s
}

// sum is the one's-complement sum of b's 16-bit big-endian words.
func sum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

// csum folds seed plus b's sum and inverts it: 0 means b verifies.
func csum(b []byte, seed uint32) uint16 {
	s := seed + sum(b)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
