package netpolicy

import "sandfs/netpolicy/spares"

// Spares keeps filters loaded ahead of need (package spares), so that a
// new sandbox's network does not wait for Load: in one lab run a Load
// took 60-160 ms of a new sandbox's 88-260 ms of network set-up (on this
// host 5 ms: maps 2 ms, the kernel's verifier the rest;
// docs/network.md). A spare is a fresh Load, untouched until taken:
// empty maps, generation 0, deny.
type Spares = spares.Pool[*Filter]

// NewSpares keeps n spare filters (at least one); the first is loaded
// now, so that a host that cannot load a filter fails here.
func NewSpares(n int) (*Spares, error) {
	return spares.New(n, true, Load, func(f *Filter) { f.Close() })
}
