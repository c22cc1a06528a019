package snapshot

import (
	"fmt"
	"strings"
	"time"
)

// Phase is one named step of taking a snapshot and how long it took.
type Phase struct {
	Name string
	Took time.Duration
}

// Timing is where the time of taking a snapshot went, in order: Write
// records its own steps (data, fsyncs, meta, rename), a caller such as
// vmm.Machine.Snapshot puts its steps before them. Diagnostics only
// (logged by the VMM, read by the benchmark); nothing depends on it.
type Timing []Phase

// Stamp is a reading of the clock Timing measures with.
type Stamp time.Duration

// clock is that clock: the monotonic time since the process started,
// unless SetClock replaced it.
var (
	clockBase = time.Now()
	clock     = func() time.Duration { return time.Since(clockBase) }
)

// SetClock makes Timing measure with f (a finer clock than the system's:
// the lab's clocksource moves in 4 ms steps and loses ticks under load;
// vmmproc gives the TSC there). Call it before any snapshot is taken.
func SetClock(f func() time.Duration) { clock = f }

// Now reads the clock.
func Now() Stamp { return Stamp(clock()) }

// Mark appends the phase name with the time since *t, and moves *t to
// now; a nil tm or t records nothing.
func (tm *Timing) Mark(name string, t *Stamp) {
	if tm == nil || t == nil {
		return
	}
	n := Now()
	*tm = append(*tm, Phase{name, time.Duration(n - *t)})
	*t = n
}

// String is "name=1.23ms name=…", the phases in order.
func (tm Timing) String() string {
	var b strings.Builder
	for i, p := range tm {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.2fms", p.Name, float64(p.Took)/float64(time.Millisecond))
	}
	return b.String()
}
