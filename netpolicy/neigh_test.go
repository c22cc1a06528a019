package netpolicy

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

// TestNeighbourScope: a neighbour solicitation (hop limit 255) to a
// denied global address is not let through as neighbour discovery: the
// host never sees it, while an allowed ping sent after it is answered.
func TestNeighbourScope(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow fd99:1::/64\n"))
	nonce := []byte{0x5a, 0xfd, 0x00, 0x13, 0xbe, 0xef}
	var seen bool
	var host *icmp.PacketConn
	must(t, in(tp.host, func() (err error) {
		host, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		return err
	}))
	defer host.Close()
	must(t, in(tp.guest, func() error {
		c, err := icmp.ListenPacket("ip6:ipv6-icmp", "fd99::2")
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.IPv6PacketConn().SetHopLimit(255); err != nil {
			return err
		}
		target := net.ParseIP("fd99:2::1")
		body := append(append(make([]byte, 4), target...), append([]byte{1, 1}, nonce...)...)
		ns := icmp.Message{Type: ipv6.ICMPTypeNeighborSolicitation, Body: &icmp.RawBody{Data: body}}
		echo := icmp.Message{Type: ipv6.ICMPTypeEchoRequest, Body: &icmp.Echo{ID: 0x5af, Seq: 2, Data: []byte("marker")}}
		for _, m := range []struct {
			msg icmp.Message
			to  string
		}{{ns, "fd99:2::1"}, {echo, "fd99:1::1"}} {
			b, err := m.msg.Marshal(nil)
			if err != nil {
				return err
			}
			if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(m.to)}); err != nil {
				return err
			}
		}
		c.SetReadDeadline(time.Now().Add(safety))
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return err
			}
			if r, err := icmp.ParseMessage(58, buf[:n]); err == nil && r.Type == ipv6.ICMPTypeEchoReply {
				return nil
			}
		}
	}))
	for _, q := range drain(t, host, true) { // what the host queued
		if bytes.Contains(q.data, nonce) {
			seen = true
		}
	}
	if seen {
		t.Error("a neighbour solicitation to denied fd99:2::1 reached the host; want dropped")
	}
}
