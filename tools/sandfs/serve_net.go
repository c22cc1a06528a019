package main

import (
	"log/slog"
	"os"

	"sandfs/ctl"
	"sandfs/netpolicy/sbnet"
)

// withNetworks gives vr's machines networks of their own (ctl.VMMRuntime.Net,
// docs/network.md). Without root, or where the host cannot make them
// (no tun, veth or nf_tables), sandboxes have no network and a warning
// says why.
func withNetworks(log *slog.Logger, vr *ctl.VMMRuntime) {
	if os.Geteuid() != 0 {
		log.Warn("serve: sandboxes have no network", "why", "not root")
		return
	}
	m, err := sbnet.NewManager(log)
	if err != nil {
		log.Warn("serve: sandboxes have no network", "why", err)
		return
	}
	vr.Net = m
	log.Info("serve: sandbox networks", "guest", sbnet.GuestAddr, "transit", sbnet.TransitPool)
}
