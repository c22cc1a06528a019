package snapshot

import "math/bits"

// Pages is a set of guest pages, one bit each (bit p%64 of word p/64),
// the layout of KVM_GET_DIRTY_LOG's bitmap.
type Pages []uint64

// NewPages returns an empty set for n pages.
func NewPages(n uint64) Pages { return make(Pages, (n+63)/64) }

// Set adds page p.
func (s Pages) Set(p uint64) { s[p/64] |= 1 << (p % 64) }

// SetRange adds pages [p, p+n).
func (s Pages) SetRange(p, n uint64) {
	for ; n > 0 && p%64 != 0; p, n = p+1, n-1 {
		s.Set(p)
	}
	for ; n >= 64; p, n = p+64, n-64 {
		s[p/64] = ^uint64(0)
	}
	for ; n > 0; p, n = p+1, n-1 {
		s.Set(p)
	}
}

// Has reports whether page p is in the set.
func (s Pages) Has(p uint64) bool { return s[p/64]&(1<<(p%64)) != 0 }

// Or adds every page of o (at most len(s) words).
func (s Pages) Or(o Pages) {
	for i := range min(len(s), len(o)) {
		s[i] |= o[i]
	}
}

// Clear empties the set.
func (s Pages) Clear() { clear(s) }

// Count is the number of pages in the set.
func (s Pages) Count() uint64 {
	var n int
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// Runs returns the set as ascending runs of at most maxRun pages (0: no
// limit), without offsets. It finds each run's start and end a word (64
// pages) at a time: a GiB dirtied is 4096 words, not 262,144 pages.
func (s Pages) Runs(maxRun uint64) []Run {
	var runs []Run
	n := uint64(len(s)) * 64
	for p := uint64(0); p < n; {
		w := s[p/64] >> (p % 64)
		if w == 0 {
			p += 64 - p%64
			continue
		}
		p += uint64(bits.TrailingZeros64(w))
		q := s.runEnd(p)
		for maxRun != 0 && q-p > maxRun {
			runs = append(runs, Run{Page: p, Count: maxRun})
			p += maxRun
		}
		runs = append(runs, Run{Page: p, Count: q - p})
		p = q
	}
	return runs
}

// runEnd returns the first page at or after p that is not in the set
// (the set's end if none).
func (s Pages) runEnd(p uint64) uint64 {
	n := uint64(len(s)) * 64
	for p < n {
		k := p % 64
		w := ^s[p/64] >> k // ones where pages are absent, from p on
		if w != 0 {
			if z := uint64(bits.TrailingZeros64(w)); z < 64-k {
				return p + z
			}
		}
		p += 64 - k
	}
	return n
}

// PagesOf returns the set of pages covered by runs, for n pages.
func PagesOf(runs []Run, n uint64) Pages {
	s := NewPages(n)
	for _, r := range runs {
		s.SetRange(r.Page, r.Count)
	}
	return s
}

// Since returns the pages the deltas after chain[i] hold (chain: full
// snapshot first, as Chain returns it), for n pages: with the pages
// dirtied since chain's last snapshot, what a delta over chain[i] must
// hold (a fold of the snapshots after it).
func Since(chain []*Snapshot, i int, n uint64) Pages {
	s := NewPages(n)
	for _, c := range chain[i+1:] {
		for _, r := range c.Runs {
			s.SetRange(r.Page, r.Count)
		}
	}
	return s
}
