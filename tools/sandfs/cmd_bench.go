package main

import "sandfs/tools/bench"

func init() {
	register("bench", "benchmarks, run in the lab: bench snapshots, bench worlds, bench net, bench hop", bench.Main)
}
