package vmmproc

import (
	"sandfs/snapshot"
	"sandfs/tools/tsc"
)

// useTSCClock makes snapshot.Timing (the phases the snapshot verb logs)
// measure with the TSC where the kernel command line gives its frequency
// (tsc_early_khz=, as the lab's does): the lab's clocksource moves in
// 4 ms steps and loses ticks under load, which made the logged phases
// add up to far less than the verb took. Elsewhere the system clock
// stays. Before the jail (it reads /proc).
func useTSCClock() {
	if clock, ok := tsc.CmdlineClock(); ok {
		snapshot.SetClock(clock)
	}
}
