package bench

import (
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// mapMem is one of the program's maps as the kernel reports it.
type mapMem struct {
	name    string
	typ     ebpf.MapType
	max     uint32
	entries int    // keys present (the tries only; -1: not counted)
	memlock uint64 // the kernel's memlock figure for the map
}

// trie reports whether m is one of the four rule tries.
func (m mapMem) trie() bool { return m.typ == ebpf.LPMTrie }

// mapMemory reads the daemon's maps (by its program's id) with the
// sandbox's policy, writes a policy of n address rules to net/policy,
// reads them again, and puts the sandbox's policy back.
func (b *netBox) mapMemory(n int) (own, full []mapMem, err error) {
	path, errPath := "sandboxes/"+b.id+"/net/policy", "sandboxes/"+b.id+"/err"
	orig, err := b.d.c.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if own, err = b.maps(); err != nil {
		return nil, nil, err
	}
	if err := b.d.c.WriteMsg(path, manyRules(n, string(orig)), errPath); err != nil {
		return nil, nil, fmt.Errorf("write %d rules: %w", n, err)
	}
	if full, err = b.maps(); err != nil {
		return nil, nil, err
	}
	if err := b.d.c.WriteMsg(path, string(orig), errPath); err != nil {
		return nil, nil, fmt.Errorf("restore the policy: %w", err)
	}
	entries := 0
	for _, m := range full {
		if m.trie() {
			entries += m.entries
		}
	}
	if entries < n { // the rules of the generation in force at least
		return nil, nil, fmt.Errorf("%d rules written, %d entries in the tries", n, entries)
	}
	return own, full, nil
}

// manyRules is policy text keep (the sandbox's) plus n distinct address
// rules: IPv4 and IPv6, allow and deny, /16 to /32 and /48 to /128, none
// covering the server (keep's rules stay in force).
func manyRules(n int, keep string) string {
	rnd := rand.New(rand.NewSource(int64(n)))
	seen := map[netip.Prefix]bool{}
	var b strings.Builder
	b.WriteString(keep)
	for len(seen) < n {
		var p netip.Prefix
		if len(seen)%4 == 3 {
			a := [16]byte{0x20, 0x01, 0x0d, 0xb8}
			rnd.Read(a[4:])
			p = netip.PrefixFrom(netip.AddrFrom16(a), 48+rnd.Intn(81)).Masked()
		} else {
			a := [4]byte{10, byte(rnd.Intn(256)), byte(rnd.Intn(256)), byte(rnd.Intn(256))}
			p = netip.PrefixFrom(netip.AddrFrom4(a), 16+rnd.Intn(17)).Masked()
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		verb := "allow"
		if len(seen)%3 == 0 {
			verb = "deny"
		}
		fmt.Fprintf(&b, "%s %s\n", verb, p)
	}
	return b.String()
}

// maps is every map of the daemon's program with its memlock and, for
// the tries, the keys present. The maps live as long as the daemon's
// Filter, attached or not.
func (b *netBox) maps() ([]mapMem, error) {
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(b.prog))
	if err != nil {
		return nil, fmt.Errorf("program %d: %w", b.prog, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, fmt.Errorf("program %d: the kernel gives no map ids", b.prog)
	}
	var out []mapMem
	for _, id := range ids {
		mm, err := readMap(id)
		if err != nil {
			return nil, err
		}
		out = append(out, mm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// readMap is map id's mapMem.
func readMap(id ebpf.MapID) (mapMem, error) {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return mapMem{}, fmt.Errorf("map %d: %w", id, err)
	}
	defer m.Close()
	mi, err := m.Info()
	if err != nil {
		return mapMem{}, err
	}
	mm := mapMem{name: mi.Name, typ: mi.Type, max: mi.MaxEntries, entries: -1}
	var ok bool
	switch mm.memlock, ok = mi.Memlock(); {
	case !ok && mi.Type == ebpf.RingBuf:
		// Linux before 6.4 computes a map's memlock from its key and
		// value sizes, 0 for a ring buffer: its memory is the ring
		// (max entries, in bytes) and a page each for the producer's
		// and the consumer's positions.
		mm.memlock = uint64(mi.MaxEntries) + 2*uint64(os.Getpagesize())
	case !ok:
		return mapMem{}, fmt.Errorf("map %s: no memlock in its fdinfo", mi.Name)
	}
	if mm.trie() {
		mm.entries = 0
		k := make([]byte, m.KeySize())
		it := m.Iterate()
		for it.Next(&k, new([]byte)) {
			mm.entries++
		}
		if err := it.Err(); err != nil {
			return mapMem{}, fmt.Errorf("map %s: %w", mi.Name, err)
		}
	}
	return mm, nil
}

// memSum is the memlock of the tries (tries) or of every map.
func memSum(ms []mapMem, tries bool) uint64 {
	var n uint64
	for _, m := range ms {
		if m.trie() || !tries {
			n += m.memlock
		}
	}
	return n
}

// netReport renders the run.
func (r *run) netReport(o netOpts, res *netResult, started time.Time) string {
	var b strings.Builder
	var un unix.Utsname
	unix.Uname(&un)
	fmt.Fprintf(&b, "## sandfs bench net\n\nOne run, %s UTC, %s; kernel %s; load average at the start %s, at the end %s; guest %d MiB, python3 in the guest timing with its monotonic clock; each round: the flow with the sandbox's filter on its tap (round 1's the daemon's own, later ones the same program and policy attached by the benchmark) and with no program attached, in the order F N, N F, F N, ..., after a warm-up flow that is not counted.\n\n",
		started.UTC().Format("2006-01-02 15:04"), where(), unix.ByteSliceToString(un.Release[:]), r.load0, loadavg(), o.mem)
	t := &table{title: fmt.Sprintf("An allowed TCP flow from a guest through its tap (%d MiB sent; %d connections)", o.mib, o.conns),
		head: []string{"round", "throughput, filter / none", "ratio", "connections/s, filter / none", "ratio"}}
	var tf, tn, cf, cn float64
	var tr, cr []float64
	for i := range res.filter {
		f, n := res.filter[i], res.none[i]
		tr, cr = append(tr, f.mibps()/n.mibps()), append(cr, f.cps()/n.cps())
		t.add(fmt.Sprint(i+1), fmt.Sprintf("%.2f / %.2f MiB/s", f.mibps(), n.mibps()), fmt.Sprintf("%.2f", tr[i]),
			fmt.Sprintf("%.1f / %.1f", f.cps(), n.cps()), fmt.Sprintf("%.2f", cr[i]))
		tf, tn, cf, cn = tf+f.tputSecs, tn+n.tputSecs, cf+f.connSecs, cn+n.connSecs
	}
	t.add("all", "", fmt.Sprintf("**%.2f**", tn/tf), "", fmt.Sprintf("**%.2f**", cn/cf))
	t.add("median", "", fmt.Sprintf("**%.2f**", median(tr)), "", fmt.Sprintf("**%.2f**", median(cr)))
	t.notes = append(t.notes, "\"all\": the ratio of the summed times; \"median\": of the rounds' ratios (the target is >= 0.9).")
	b.WriteString(t.markdown() + "\n")
	m := &table{title: fmt.Sprintf("The program's maps (kernel memlock), with the sandbox's policy and with %d address rules", o.rules),
		head: []string{"map", "type", "max entries", "entries, own policy", "memlock, own policy", fmt.Sprintf("entries, %d rules", o.rules), fmt.Sprintf("memlock, %d rules", o.rules)}}
	for i, a := range res.mem {
		z := res.memN[i]
		m.add(a.name, a.typ.String(), fmt.Sprint(a.max), entries(a.entries), fmt.Sprint(a.memlock), entries(z.entries), fmt.Sprint(z.memlock))
	}
	m.add("tries", "", "", "", fmt.Sprint(memSum(res.mem, true)), "", fmt.Sprint(memSum(res.memN, true)))
	m.add("all", "", "", "", fmt.Sprint(memSum(res.mem, false)), "", fmt.Sprint(memSum(res.memN, false)))
	m.notes = append(m.notes, "A ring buffer's memlock, which Linux before 6.4 shows as 0, is its size plus two pages (its positions).")
	b.WriteString(m.markdown())
	return b.String()
}

// median of xs (not empty); sorts xs.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}

func entries(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
