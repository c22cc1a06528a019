// Command sandfs-vmm is the VMM process alone: `sandfs-vmm vmm -config
// FILE` is what `sandfs vmm -config FILE` is (vmmproc.Main), in a binary
// that links only vmm/... and what vmmproc needs, not the daemon, the
// tree's transports, netpolicy's eBPF, E2B or the benchmarks. Each
// sandbox runs one, so its text, read-only data, package inits, heap and
// GC metadata are what every idle sandbox pays (docs/snapshots.md "What
// an idle VMM's memory is"). `make build` builds it as bin/sandfs-vmm,
// beside bin/sandfs, where the daemon and the benchmark find it
// (vmmproc.FindBinary); without it they run `sandfs vmm` as before.
//
// The arguments are those Launch passes to either binary: "vmm", then
// vmmproc.Main's flags.
package main

import (
	"fmt"
	"os"

	"sandfs/vmm/vmmproc"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "vmm" {
		fmt.Fprintln(os.Stderr, "usage: sandfs-vmm vmm -config FILE (started by the daemon: vmmproc.Launch)")
		os.Exit(2)
	}
	os.Exit(vmmproc.Main(os.Args[2:]))
}
