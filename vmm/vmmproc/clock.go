package vmmproc

import (
	"os"
	"strconv"
	"strings"
	"time"

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
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		v, ok := strings.CutPrefix(f, "tsc_early_khz=")
		if !ok {
			continue
		}
		khz, err := strconv.ParseFloat(v, 64)
		if err != nil || khz <= 0 {
			return
		}
		t0 := tsc.Read()
		snapshot.SetClock(func() time.Duration {
			return time.Duration(float64(tsc.Read()-t0) / khz * 1e6)
		})
		return
	}
}
