// Package sbnet is the network of one sandbox on the host: a network
// namespace of its own holding the tap the sandbox's VMM reads and
// writes (tap0), the egress filter on the tap's ingress (package
// netpolicy), and a veth pair to the host's namespace with NAT on both
// sides, so that every guest has the same address (GuestAddr) and a
// clone or a restored snapshot needs no re-addressing:
//
//	guest eth0 169.254.68.6/30
//	    │ virtio-net ─ VMM ─ tap fd
//	    ▼
//	sandbox netns: tap0 169.254.68.5/30 [netpolicy filter on ingress]
//	               up0  100.127.A.B+1/31 ── masquerade (nft table ip sandfs)
//	    │ veth
//	    ▼
//	host netns:    sfnN 100.127.A.B/31 ── masquerade of 100.127.0.0/16
//	                                      to every other destination (the uplink)
//
// A Manager makes (Create) and removes (Net.Remove) these. Nothing holds
// a namespace but the daemon's handle and the tap's descriptors (a tap's
// file holds the namespace it was made in); no bind mount, no name. So
// when the daemon is killed, a namespace lives exactly as long as its
// VMM holds the tap, and when that ends the kernel removes the
// namespace with its tap, veth (both ends) and NAT table: nothing can be
// left over. A restarted daemon finds the namespace of an adopted VMM
// through the VMM's tap descriptor (Open: pidfd_getfd, TUNGETDEVNETNS).
//
// Transit addresses (the /31 per sandbox in TransitPool) are chosen by
// scanning the host's addresses, so several daemons on one host do not
// collide. The host's namespace gets ip_forward=1 and one nft table
// (ip sandfs-nat) shared by all managers.
//
// Lock order: Manager.mu, then Net.mu. The namespace switches happen on
// a locked OS thread (InNS) and never hold either lock across a call
// that could block on the other.
package sbnet
