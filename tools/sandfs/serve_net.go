package main

import (
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"sandfs/ctl"
	"sandfs/netpolicy/sbnet"
)

// withNetworks gives vr's machines networks of their own (ctl.VMMRuntime.Net,
// docs/network.md), whose resolvers forward to upstream ("": the first
// nameserver of /etc/resolv.conf; none there: sandboxes resolve no
// name). Without root, or where the host cannot make them (no tun, veth
// or nf_tables), sandboxes have no network and a warning says why.
func withNetworks(log *slog.Logger, vr *ctl.VMMRuntime, upstream string) {
	if os.Geteuid() != 0 {
		log.Warn("serve: sandboxes have no network", "why", "not root")
		return
	}
	m, err := sbnet.NewManager(log)
	if err != nil {
		log.Warn("serve: sandboxes have no network", "why", err)
		return
	}
	// Two spare networks and two spare filters: a new sandbox takes a
	// network made ahead rather than wait for its namespace, NAT tables
	// and the kernel's verifier of its filter (docs/network.md).
	if err := m.KeepSpares(2); err != nil {
		log.Warn("serve: sandboxes have no network", "why", err)
		m.Close()
		return
	}
	vr.Net = m
	if upstream == "" {
		upstream = hostResolver("/etc/resolv.conf")
	}
	vr.DNSUpstream = upstream
	if upstream == "" {
		log.Warn("serve: no host resolver (no nameserver in /etc/resolv.conf, no --resolver): sandboxes resolve no name")
	}
	log.Info("serve: sandbox networks", "guest", sbnet.GuestAddr, "transit", sbnet.TransitPool, "resolver", upstream)
}

// hostResolver is the first nameserver line of resolv.conf as
// HOST:53, or "".
func hostResolver(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip, err := netip.ParseAddr(f[1]); err == nil {
				return netip.AddrPortFrom(ip.WithZone(""), 53).String()
			}
		}
	}
	return ""
}
