// Package guest is the in-guest agent of sandfs: the init duties of PID 1
// (Mounts, SetClock, SetHostname, Network, EnsureUsers, zombie reaping)
// and a 9P2000.L server (Serve) that the host daemon binds into
// /sandboxes/<id>/. The binary is ./guest/cmd/sandfs-init.
//
// The full tree and ctl grammar are documented below (see "Tree").
package guest
