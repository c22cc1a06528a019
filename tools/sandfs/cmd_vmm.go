package main

import (
	"sandfs/vmm/bench"
	"sandfs/vmm/testguest"
	"sandfs/vmm/vmmproc"
)

func init() {
	register("vmm", "run one sandbox VM (started by the daemon): vmm -config FILE | vmm bench | vmm guest-init", vmmMain)
}

// vmmMain is `sandfs vmm`: the VMM process (vmmproc.Main), or the benchmark
// (`vmm bench`) and its guest's init (`vmm guest-init`), which live
// outside the product package.
func vmmMain(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "guest-init":
			testguest.Init()
			return 0
		case "bench":
			return bench.Main(args[1:])
		}
	}
	return vmmproc.Main(args)
}
