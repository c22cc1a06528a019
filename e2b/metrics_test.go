package e2b

import (
	"errors"
	"net/url"
	"sync"
	"syscall"
	"testing"

	sfs "sandfs/fs"
)

func TestMetricsRange(t *testing.T) {
	for q, want := range map[string][3]int64{ // start, end, ok (1)
		"":                     {0, 0, 1},
		"start=10":             {10, 0, 1},
		"start=10&end=20":      {10, 20, 1},
		"start=20&end=10":      {0, 0, 0},
		"start=-1":             {0, 0, 0},
		"end=x":                {0, 0, 0},
		"start=99999999999999": {0, 0, 0},
		"start=1.5":            {0, 0, 0},
		"end=1700000000":       {0, 1700000000, 1},
	} {
		v, _ := url.ParseQuery(q)
		s, e, ok := metricsRange(v)
		if ok != (want[2] == 1) || (ok && (s != want[0] || e != want[1])) {
			t.Errorf("metricsRange(%q) = %d, %d, %v; want %v", q, s, e, ok, want)
		}
	}
}

func TestSamplesRing(t *testing.T) {
	var s samples
	for i := range maxSamples + 10 {
		s.add("a", sandboxMetric{TimestampUnix: int64(1000 + i)}, cpuSample{busy: uint64(i), total: uint64(10 * i)})
	}
	all := s.between("a", 0, 0)
	if len(all) != maxSamples || all[0].TimestampUnix != 1010 || all[len(all)-1].TimestampUnix != int64(1000+maxSamples+9) {
		t.Fatalf("ring: %d samples from %d; want the last %d", len(all), all[0].TimestampUnix, maxSamples)
	}
	if got := s.between("a", 1050, 1052); len(got) != 3 || got[0].TimestampUnix != 1050 {
		t.Errorf("between(1050, 1052) = %v; want 3 samples from 1050", got)
	}
	if got := s.between("b", 0, 0); got == nil || len(got) != 0 {
		t.Errorf("between of an unknown sandbox = %#v; want an empty list", got)
	}
	if c := s.m["a"].cpu; c.busy != uint64(maxSamples+9) {
		t.Errorf("the newest /proc/stat = %+v; want the newest sample's", c)
	}
	s.drop("a")
	if len(s.between("a", 0, 0)) != 0 || s.m["a"] != nil {
		t.Error("drop left samples")
	}
}

// TestSamplesConcurrent: getMetrics calls at once each measure CPU
// against the newest /proc/stat recorded before theirs, never two
// against one (the reading of the previous sample and the recording are
// one critical section). Run with -race.
func TestSamplesConcurrent(t *testing.T) {
	const workers = 8
	per := maxSamples / workers // the ring keeps them all
	cpuOf := func(k int64) cpuSample { return cpuSample{busy: uint64(k * k), total: uint64(1000 * k)} }
	var s samples
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range per {
				k := int64(1 + g*per + i) // unique: the sample's /proc/stat and timestamp
				s.add("a", sandboxMetric{TimestampUnix: k}, cpuOf(k))
			}
		}()
	}
	close(start)
	wg.Wait()
	got := s.between("a", 0, 0)
	if len(got) != workers*per {
		t.Fatalf("%d samples recorded; want %d", len(got), workers*per)
	}
	var prev cpuSample // replay in recorded order
	for i, m := range got {
		cur := cpuOf(m.TimestampUnix)
		if want := cpuPct(prev, cur); m.CPUUsedPct != want {
			t.Errorf("sample %d (#%d recorded): cpuUsedPct %v; want %v, against the newest before it", m.TimestampUnix, i, m.CPUUsedPct, want)
		}
		if cur.total > prev.total {
			prev = cur
		}
	}
}

func TestDiskFigures(t *testing.T) {
	total, used, err := diskFigures(sfs.FSStat{BlockSize: 4096, Blocks: 1000, BlocksFree: 250, BlocksAv: 200})
	if err != nil || total != 4096000 || used != 3072000 {
		t.Errorf("diskFigures = %d, %d, %v; want 4096000, 3072000", total, used, err)
	}
	for _, bad := range []sfs.FSStat{
		{BlockSize: 0, Blocks: 10},
		{BlockSize: 1 << 30, Blocks: 10},
		{BlockSize: 4096, Blocks: 10, BlocksFree: 11},
		{BlockSize: 4096, Blocks: 1 << 62},
	} {
		if _, _, err := diskFigures(bad); !errors.Is(err, syscall.EIO) {
			t.Errorf("diskFigures(%+v): %v; want EIO", bad, err)
		}
	}
}
