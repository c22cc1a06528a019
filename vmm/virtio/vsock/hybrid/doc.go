// Package hybrid is the host's end of the hybrid-vsock handshake that
// package vsock (the device, vmm/virtio/vsock) serves, and the vsock port
// of the guest agent. It imports only the standard library, so the
// daemon, the guest agent and tests can all use it.
//
// The host side of a guest's vsock is a unix socket owned by the VMM
// (Firecracker's model). To reach guest port P, connect to it and
// exchange one line each way:
//
//	host → VMM   "CONNECT P\n"
//	VMM → host   "OK <host-side port>\n"     (anything else: refused)
//
// after which the stream is the guest connection. The VMM's side is
// readConnect and confirm in vmm/virtio/vsock/host.go.
package hybrid

// AgentPort is the vsock port on which the guest agent (sandfs-init)
// serves its 9P2000.L tree (procs/, fs/; see package guest): 9P's IANA
// port, 564.
const AgentPort = 564

// CtlPort is the vsock port on which the guest agent takes its /ctl
// messages as lines, without 9P (package guest, ServeCtlLines): the
// host's refresh of a restored guest in one exchange.
const CtlPort = 565
