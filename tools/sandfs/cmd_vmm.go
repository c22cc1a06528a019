package main

import "sandfs/vmm"

func init() {
	register("vmm", "run one sandbox VM (started by the daemon): vmm -config FILE | vmm bench | vmm guest-init", vmm.Main)
}
