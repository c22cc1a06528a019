// Package tsc reads the x86 time-stamp counter: a clock finer than the
// lab's clocksource (refined-jiffies, 4 ms steps), which the lab's
// TSC-frequency check (tools/lab) and the benchmarks (tools/bench) use.
package tsc

// Read returns the time-stamp counter (RDTSC after LFENCE, so it is not
// read before earlier instructions complete).
func Read() uint64
