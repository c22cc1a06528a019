// Package netpolicy is a sandbox's egress policy: its text grammar (Parse,
// Policy.String) and its enforcement by an eBPF tc program on the host
// side of the sandbox's tap (Filter). docs/network.md documents both.
//
// The grammar is pure (text in, *Policy out, no I/O). A Filter owns the
// loaded program and its maps; Attach puts it on one link through the
// caller's netlink handle (so tests use a handle in a network namespace
// of their own) and Close removes the qdisc, the filter and the maps.
// Set replaces the policy live and atomically (two generations of rules
// in the maps, switched by one store); the program keeps no connection
// state, so a change applies to every packet after it.
//
// Lock order: Filter.mu only; it guards the maps' contents against two
// concurrent Sets.
package netpolicy
