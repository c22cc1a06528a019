package vsock

import "encoding/binary"

// Packet header (struct virtio_vsock_hdr, virtio 1.x §5.10.6), 44 bytes,
// little-endian:
//
//	+0  src_cid u64   +8  dst_cid u64
//	+16 src_port u32  +20 dst_port u32
//	+24 len u32       +28 type u16    +30 op u16
//	+32 flags u32     +36 buf_alloc u32  +40 fwd_cnt u32
const hdrLen = 44

// Operations and constants (include/uapi/linux/virtio_vsock.h).
const (
	opRequest       = 1 // VIRTIO_VSOCK_OP_REQUEST
	opResponse      = 2 // VIRTIO_VSOCK_OP_RESPONSE
	opRST           = 3 // VIRTIO_VSOCK_OP_RST
	opShutdown      = 4 // VIRTIO_VSOCK_OP_SHUTDOWN
	opRW            = 5 // VIRTIO_VSOCK_OP_RW
	opCreditUpdate  = 6 // VIRTIO_VSOCK_OP_CREDIT_UPDATE
	opCreditRequest = 7 // VIRTIO_VSOCK_OP_CREDIT_REQUEST

	typeStream = 1 // VIRTIO_VSOCK_TYPE_STREAM

	shutRcv  = 1 // VIRTIO_VSOCK_SHUTDOWN_F_RECEIVE
	shutSend = 2 // VIRTIO_VSOCK_SHUTDOWN_F_SEND

	eventTransportReset = 0 // VIRTIO_VSOCK_EVENT_TRANSPORT_RESET

	// HostCID is the host's address (VMADDR_CID_HOST).
	HostCID = 2
)

type hdr struct {
	SrcCID, DstCID   uint64
	SrcPort, DstPort uint32
	Len              uint32
	Type, Op         uint16
	Flags            uint32
	BufAlloc, FwdCnt uint32
}

func (h *hdr) decode(b []byte) {
	le := binary.LittleEndian
	h.SrcCID, h.DstCID = le.Uint64(b[0:]), le.Uint64(b[8:])
	h.SrcPort, h.DstPort = le.Uint32(b[16:]), le.Uint32(b[20:])
	h.Len = le.Uint32(b[24:])
	h.Type, h.Op = le.Uint16(b[28:]), le.Uint16(b[30:])
	h.Flags, h.BufAlloc, h.FwdCnt = le.Uint32(b[32:]), le.Uint32(b[36:]), le.Uint32(b[40:])
}

func (h *hdr) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], h.SrcCID)
	le.PutUint64(b[8:], h.DstCID)
	le.PutUint32(b[16:], h.SrcPort)
	le.PutUint32(b[20:], h.DstPort)
	le.PutUint32(b[24:], h.Len)
	le.PutUint16(b[28:], h.Type)
	le.PutUint16(b[30:], h.Op)
	le.PutUint32(b[32:], h.Flags)
	le.PutUint32(b[36:], h.BufAlloc)
	le.PutUint32(b[40:], h.FwdCnt)
}
