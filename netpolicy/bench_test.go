package netpolicy

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// rulesN is a policy of n rules: half allow /32s, half deny /24s,
// IPv4 and IPv6 alike, shifted by off so two calls share no rule.
func rulesN(n, off int) *Policy {
	p := &Policy{}
	for i := range n {
		j := i + off
		b := [4]byte{10, byte(j >> 16), byte(j >> 8), byte(j)}
		switch i % 4 {
		case 0:
			p.Rules = append(p.Rules, Rule{Allow, netip.PrefixFrom(netip.AddrFrom4(b), 32)})
		case 1:
			b[3] = 0
			p.Rules = append(p.Rules, Rule{Deny, netip.PrefixFrom(netip.AddrFrom4(b), 24)})
		case 2:
			a := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, b[1], b[2], b[3], 15: 1})
			p.Rules = append(p.Rules, Rule{Allow, netip.PrefixFrom(a, 128)})
		case 3:
			a := netip.AddrFrom16([16]byte{0xfd, 1, 0, b[1], b[2], b[3]})
			p.Rules = append(p.Rules, Rule{Deny, netip.PrefixFrom(a, 48)})
		}
	}
	p.canonical()
	return p
}

// memlock is the kernel's "memlock:" for m (its memory, from fdinfo).
func memlock(m *ebpf.Map) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "memlock:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no memlock in fdinfo of map %v", m)
}

// BenchmarkSet: one Set replacing every rule of a policy of n rules
// (it writes n new rules and deletes the n its generation held), for
// n = 1 and 1000 in one run (compare the two as a ratio), and the
// maps' memory: map-bytes is the kernel's memlock summed over the four
// tries holding two generations of n rules, empty-bytes the same for
// fresh maps (6.4+ kernels count the nodes present, older ones the
// maximum).
func BenchmarkSet(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) { benchSet(b, n) })
	}
}

func benchSet(b *testing.B, n int) {
	f, err := Load()
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	empty, err := mapBytes(f)
	if err != nil {
		b.Fatal(err)
	}
	pols := make([]*Policy, 8)
	for i := range pols {
		pols[i] = rulesN(n, i*n)
	}
	for i := 0; b.Loop(); i++ {
		if err := f.Set(pols[i%len(pols)]); err != nil {
			b.Fatal(err)
		}
	}
	full, err := mapBytes(f)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(full), "map-bytes")
	b.ReportMetric(float64(empty), "empty-bytes")
}

func mapBytes(f *Filter) (int, error) {
	total := 0
	for _, m := range []*ebpf.Map{f.objs.Allow4, f.objs.Deny4, f.objs.Allow6, f.objs.Deny6} {
		n, err := memlock(m)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
