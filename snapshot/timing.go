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

// add appends the phase name with the time since *t, and moves *t to now.
func (tm *Timing) add(name string, t *time.Time) {
	n := time.Now()
	*tm = append(*tm, Phase{name, n.Sub(*t)})
	*t = n
}

// Mark is add for callers outside the package.
func (tm *Timing) Mark(name string, t *time.Time) { tm.add(name, t) }

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
