package e2b

import (
	"net/url"
	"strconv"
	"sync"
	"time"
)

// maxSamples bounds each sandbox's history of metrics samples.
const maxSamples = 120

// samples is each sandbox's history of getMetrics samples: the adapter
// takes one at each getMetrics of a running sandbox (it samples nothing
// on its own), keeps the last maxSamples, and answers a call with those
// in its start/end range. The last one's /proc/stat makes the next
// one's cpuUsedPct, over the time between the two calls.
type samples struct {
	mu sync.Mutex // guards m
	m  map[string]*history
}

// history is one sandbox's samples, oldest first.
type history struct {
	cpu  cpuSample // the newest /proc/stat recorded (the most jiffies)
	ring []sandboxMetric
}

// add records m, whose /proc/stat was cpu, as sandbox id's newest
// sample, dropping the oldest beyond maxSamples. In the same critical
// section it sets m's cpuUsedPct against the newest /proc/stat recorded
// before, so two getMetrics at once never measure against one previous
// sample; a /proc/stat older than that one (read first, recorded last)
// does not replace it. It returns m as recorded.
func (s *samples) add(id string, m sandboxMetric, cpu cpuSample) sandboxMetric {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*history{}
	}
	h := s.m[id]
	if h == nil {
		h = &history{}
		s.m[id] = h
	}
	m.CPUUsedPct = cpuPct(h.cpu, cpu)
	if cpu.total > h.cpu.total {
		h.cpu = cpu
	}
	if len(h.ring) == maxSamples {
		h.ring = append(h.ring[:0], h.ring[1:]...)
	}
	h.ring = append(h.ring, m)
	return m
}

// between returns sandbox id's samples whose unix second is within
// [start, end] (0: unbounded), oldest first; never nil.
func (s *samples) between(id string, start, end int64) []sandboxMetric {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []sandboxMetric{}
	if h := s.m[id]; h != nil {
		for _, m := range h.ring {
			if (start == 0 || m.TimestampUnix >= start) && (end == 0 || m.TimestampUnix <= end) {
				out = append(out, m)
			}
		}
	}
	return out
}

func (s *samples) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// metricsRange parses getMetrics' start and end, unix seconds (the
// SDK's Math.round of a Date); absent: 0. ok is false for a value that
// is not a non-negative integer below year 10000, or start after end.
func metricsRange(q url.Values) (start, end int64, ok bool) {
	parse := func(name string) (int64, bool) {
		v := q.Get(name)
		if v == "" {
			return 0, true
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil && n >= 0 && n < 253402300800
	}
	start, ok1 := parse("start")
	end, ok2 := parse("end")
	return start, end, ok1 && ok2 && (end == 0 || start <= end)
}

// unixSec is t's unix second, as the SDK rounds its Dates.
func unixSec(t time.Time) int64 { return t.Round(time.Second).Unix() }
