// Package tsc reads the x86 time-stamp counter: a clock finer than the
// lab's clocksource (refined-jiffies, 4 ms steps), which the lab's
// TSC-frequency check (tools/lab), the benchmarks (tools/bench) and the
// snapshot phases the VMM and the daemon log (CmdlineClock) use.
package tsc

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Read returns the time-stamp counter (RDTSC after LFENCE, so it is not
// read before earlier instructions complete).
func Read() uint64

// CmdlineKHz is the TSC frequency the kernel command line gives
// (tsc_early_khz=, as the lab's does), and ok false where it gives none.
func CmdlineKHz() (khz float64, ok bool) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return 0, false
	}
	for _, f := range strings.Fields(string(b)) {
		if v, found := strings.CutPrefix(f, "tsc_early_khz="); found {
			khz, err := strconv.ParseFloat(v, 64)
			return khz, err == nil && khz > 0
		}
	}
	return 0, false
}

// CmdlineClock returns a monotonic clock (the time since the call) that
// counts the TSC at CmdlineKHz, and ok false where the command line
// gives no frequency: there the system clock is fine enough.
func CmdlineClock() (clock func() time.Duration, ok bool) {
	khz, ok := CmdlineKHz()
	if !ok {
		return nil, false
	}
	t0 := Read()
	return func() time.Duration { return time.Duration(float64(Read()-t0) / khz * 1e6) }, true
}
