package net

import "encoding/binary"

// The transmit offloads the device offers (virtio 1.x §5.1.6.2): the
// guest may hand over a frame whose TCP or UDP checksum is left partial
// (CSUM), and TCP segments of up to 64 KiB (HOST_TSO4, HOST_TSO6) that
// the host kernel forwards whole or cuts after the tap. A guest's bulk
// send then costs the guest, the VMM, the tap and the sandbox's egress
// program one frame per 64 KiB instead of one per 1500 bytes.
//
// Nothing is offered for receiving: the tap keeps TUNSETOFFLOAD 0, so the
// frames it hands the VMM are complete and checksummed, and the guest's
// receive buffers stay one page each.
const (
	fCsum     = 0  // VIRTIO_NET_F_CSUM
	fHostTSO4 = 11 // VIRTIO_NET_F_HOST_TSO4
	fHostTSO6 = 12 // VIRTIO_NET_F_HOST_TSO6
)

// struct virtio_net_hdr_v1's flags and gso_type values.
const (
	hdrNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM

	gsoNone  = 0 // VIRTIO_NET_HDR_GSO_NONE
	gsoTCPv4 = 1 // VIRTIO_NET_HDR_GSO_TCPV4
	gsoTCPv6 = 4 // VIRTIO_NET_HDR_GSO_TCPV6
)

// prepareTx checks the guest's frame f (header and packet) against the
// features negotiated, feats, and completes the partial checksum of a
// frame that is not a segment, so that every single frame leaves the
// VMM checksummed, as one did before the offloads: the egress program's
// answer to a denied SYN (a RST rewritten in place) stays right, which a
// partial checksum would spoil on its way back. It reports false for a
// frame to drop: a header the guest may not send (a GSO type or flag not
// negotiated), or a checksum place outside the packet.
func prepareTx(f []byte, feats uint64) bool {
	if len(f) < VnetHdrLen {
		return false
	}
	flags, gso := f[0], f[1]
	if flags&^hdrNeedsCsum != 0 {
		return false
	}
	switch gso {
	case gsoNone:
	case gsoTCPv4, gsoTCPv6:
		bit := fHostTSO4
		if gso == gsoTCPv6 {
			bit = fHostTSO6
		}
		// A segment's checksum is the kernel's to complete, per piece.
		return feats&(1<<bit) != 0 && flags&hdrNeedsCsum != 0
	default:
		return false
	}
	if flags&hdrNeedsCsum == 0 {
		return true
	}
	if feats&(1<<fCsum) == 0 {
		return false
	}
	p := f[VnetHdrLen:]
	start := int(binary.LittleEndian.Uint16(f[6:]))
	at := start + int(binary.LittleEndian.Uint16(f[8:]))
	if at+2 > len(p) {
		return false
	}
	// The guest put the pseudo-header's sum where the checksum goes; the
	// checksum is the complement of the sum from start to the end.
	c := ^fold(sum(p[start:]))
	if c == 0 {
		c = 0xffff // a UDP checksum of 0 would mean none
	}
	binary.BigEndian.PutUint16(p[at:], c)
	f[0] = 0
	return true
}

// sum is the one's-complement sum of b as big-endian 16-bit words (an odd
// last byte padded with zero), unfolded.
func sum(b []byte) uint64 {
	var s uint64
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold folds a sum of sum into 16 bits.
func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
