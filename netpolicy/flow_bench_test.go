package netpolicy

import (
	"io"
	"net"
	"testing"
	"time"
)

// flowBytes and flowConns size one measurement of BenchmarkFlow.
const (
	flowBytes = 256 << 20
	flowConns = 2000
)

// BenchmarkFlow measures an allowed TCP flow from the guest namespace
// through the host side's ingress with the program attached (policy
// "allow 10.99.1.0/24") and with none: throughput (one connection
// sending flowBytes to a sink) and connection rate (flowConns connects,
// each accepted and closed). The two alternate, filter first, twice, and
// the figures reported are the ratios filter/none of the sums
// (docs/network.md records one run): make bench-netpolicy-flow.
func BenchmarkFlow(b *testing.B) {
	tp := newTopo(b, mustParse(b, "allow 10.99.1.0/24\n"))
	tp.serve(b)
	must(b, in(tp.host, func() error {
		l, err := net.Listen("tcp", "10.99.1.1:9000")
		if err != nil {
			return err
		}
		b.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(io.Discard, c); c.Close() }()
			}
		}()
		return nil
	}))
	var tput, rate [2]time.Duration // index: 1 filter, 0 none
	for range b.N {
		for _, filter := range []bool{true, false, true, false} {
			tp.setFilter(b, filter)
			i := 0
			if filter {
				i = 1
			}
			tput[i] += tp.timeSend(b)
			rate[i] += tp.timeConnects(b)
		}
	}
	b.ReportMetric(float64(tput[0])/float64(tput[1]), "throughput-ratio")
	b.ReportMetric(float64(rate[0])/float64(rate[1]), "connrate-ratio")
	n := float64(2 * b.N)
	b.ReportMetric(n*flowBytes/tput[1].Seconds()/(1<<20), "MiB/s-filter")
	b.ReportMetric(n*flowBytes/tput[0].Seconds()/(1<<20), "MiB/s-none")
	b.ReportMetric(n*flowConns/rate[1].Seconds(), "conn/s-filter")
	b.ReportMetric(n*flowConns/rate[0].Seconds(), "conn/s-none")
}

// setFilter attaches a fresh filter with the topology's allow policy, or
// removes it.
func (tp *topo) setFilter(b *testing.B, on bool) {
	if tp.f != nil {
		must(b, tp.f.Close())
		tp.f = nil
	}
	if !on {
		return
	}
	f, err := Load()
	must(b, err)
	must(b, f.Set(mustParse(b, "allow 10.99.1.0/24\n")))
	must(b, f.Attach(tp.hh, tp.h0.Attrs().Index))
	tp.f = f
}

// timeSend sends flowBytes over one connection from the guest.
func (tp *topo) timeSend(b *testing.B) time.Duration {
	var d time.Duration
	buf := make([]byte, 1<<20)
	must(b, in(tp.guest, func() error {
		c, err := net.Dial("tcp", "10.99.1.1:9000")
		if err != nil {
			return err
		}
		defer c.Close()
		start := time.Now()
		for sent := 0; sent < flowBytes; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
		d = time.Since(start)
		return nil
	}))
	return d
}

// timeConnects opens and closes flowConns connections from the guest.
func (tp *topo) timeConnects(b *testing.B) time.Duration {
	var d time.Duration
	must(b, in(tp.guest, func() error {
		start := time.Now()
		for range flowConns {
			c, err := net.Dial("tcp", "10.99.1.1:80")
			if err != nil {
				return err
			}
			c.Close()
		}
		d = time.Since(start)
		return nil
	}))
	return d
}
