package bench

import (
	"strconv"
	"time"

	"sandfs/tools/tsc"
)

// The benchmark times with the TSC, not time.Now: the lab's clocksource
// is refined-jiffies (its TSC is marked unstable at boot), whose 4 ms
// steps are the size of the figures measured. The lab's TSC is one clock
// for both vCPUs (tools/lab starts its kernel with tsc_early_khz; a ping-
// pong of 20,000 reads between threads pinned to each vCPU saw no step
// back), so a duration may start and end on different CPUs.

// stamp is a TSC reading.
type stamp uint64

// tscKHz is the TSC frequency, set by initClock.
var tscKHz float64

func now() stamp { return stamp(tsc.Read()) }

func since(s stamp) time.Duration {
	return time.Duration(float64(uint64(now())-uint64(s)) / tscKHz * 1e6)
}

// initClock sets the TSC frequency: tsc_early_khz= of the kernel command
// line (the lab gives it), else measured against the system clock over a
// second. It returns where the frequency came from.
func initClock() string {
	if k, ok := tsc.CmdlineKHz(); ok {
		tscKHz = k
		return "TSC, " + strconv.FormatFloat(k, 'f', -1, 64) + " kHz from tsc_early_khz"
	}
	t0, c0 := time.Now(), tsc.Read()
	time.Sleep(time.Second)
	t1, c1 := time.Now(), tsc.Read()
	tscKHz = float64(c1-c0) / float64(t1.Sub(t0).Nanoseconds()) * 1e6
	return "TSC, " + strconv.FormatFloat(tscKHz, 'f', 0, 64) + " kHz measured over 1 s"
}

// span is the time from a to b.
func span(a, b stamp) time.Duration {
	return time.Duration(float64(uint64(b)-uint64(a)) / tscKHz * 1e6)
}
