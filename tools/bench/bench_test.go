package bench

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const smapsText = `55d0a0000000-55d0a0400000 r-xp 00000000 00:1f 12 /opt/sandfs/bin/sandfs
Size:               4096 kB
Rss:                2048 kB
Pss:                1024 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
7f0000000000-7f0008000000 rw-p 00000000 00:1e 99 /tmp/sbench/t1/store/base/mem
Size:             131072 kB
Pss:               12000 kB
Private_Dirty:       900 kB
Anonymous:           900 kB
7f0008000000-7f0008001000 rw-p 00000000 00:00 0 
Pss:                 300 kB
Anonymous:           300 kB
7f0010000000-7f0010100000 rw-p 00100000 00:1e 99 /tmp/sbench/t1/store/base/mem
Pss:                  40 kB
Anonymous:            20 kB
`

func TestParseSmaps(t *testing.T) {
	ms, err := parseSmaps(strings.NewReader(smapsText))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 || ms[0].path != "/opt/sandfs/bin/sandfs" || ms[2].path != "" || ms[0].fields["Pss"] != 1024 {
		t.Fatalf("parsed %+v", ms)
	}
	if _, ok := ms[0].fields["VmFlags"]; ok {
		t.Errorf("VmFlags (not kB) parsed as a size")
	}
	pss, anon := guestUse(ms, "/tmp/sbench/t1/store/base/mem")
	if pss != 12040 || anon != 920 {
		t.Errorf("guestUse = %d, %d; want 12040, 920", pss, anon)
	}
	if bin, an := splitUse(ms, "/opt/sandfs/bin/sandfs"); bin != 1024 || an != 300 {
		t.Errorf("splitUse = %d, %d; want 1024, 300", bin, an)
	}
	m := memUse{pss: 13364, guestPSS: pss, guestAnon: anon}
	if m.beyond() != 13364-12040+920 {
		t.Errorf("beyond = %d", m.beyond())
	}
	roll, err := parseSmaps(strings.NewReader("7ffc0000-7ffd0000 ---p 00000000 00:00 0  [rollup]\nRss: 20 kB\nPss: 17 kB\n"))
	if err != nil || len(roll) != 1 || roll[0].fields["Pss"] != 17 || roll[0].path != "[rollup]" {
		t.Errorf("rollup: %+v, %v", roll, err)
	}
	for _, bad := range []string{"Pss: 1 kB\n", "garbage\n", "1-2 r 0 0 0\nPss: x kB\n"} {
		if _, err := parseSmaps(strings.NewReader(bad)); err == nil {
			t.Errorf("parseSmaps(%q): nil error", bad)
		}
	}
}

func TestTableMarkdown(t *testing.T) {
	tb := &table{title: "T", head: []string{"a", "b"}, notes: []string{"note"}}
	tb.add("1", "x|y")
	tb.add("2")
	want := "### T\n\n| a | b |\n|---|---|\n| 1 | x\\|y |\n| 2 |  |\n\nnote\n"
	if got := tb.markdown(); got != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestSample(t *testing.T) {
	s := sample{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}
	if s.median() != 20*time.Millisecond || s.spread() != "10.0-40.0" {
		t.Errorf("median %v spread %s", s.median(), s.spread())
	}
	if ratio(3*time.Millisecond, 2*time.Millisecond) != "1.50" || ratio(1, 0) != "-" {
		t.Errorf("ratio")
	}
	if v, err := intList("128, 2048,"); err != nil || len(v) != 2 || v[1] != 2048 {
		t.Errorf("intList = %v, %v", v, err)
	}
	if _, err := intList("1,-2"); err == nil {
		t.Errorf("intList(-2): nil error")
	}
}

func TestLastPhases(t *testing.T) {
	log := `time=x level=INFO msg="vmm: snapshot" dir=/a pages=3 phases="save-state=1.00ms collect=2.00ms"
time=x level=INFO msg="vmm: control" err="x"
time=x level=INFO msg="vmm: snapshot" dir=/b pages=4 phases="save-state=3.00ms write=4.00ms"
time=x level=INFO msg="vmm: other" phases="nope"
`
	if got, want := lastPhases(log, "/b"), "save-state=3.00ms write=4.00ms"; got != want {
		t.Errorf("lastPhases = %q, want %q", got, want)
	}
	if got, want := lastPhases(log, "/a"), "save-state=1.00ms collect=2.00ms"; got != want {
		t.Errorf("lastPhases of /a = %q, want %q", got, want)
	}
	if got := lastPhases(log, "/c"); got != "" {
		t.Errorf("lastPhases of a snapshot not logged yet = %q", got)
	}
	if got := lastPhases(`msg="vmm: control"`, "/a"); got != "" {
		t.Errorf("lastPhases of a log without a snapshot = %q", got)
	}
}

// TestPlotSeries: a report's table gives the plot's series (x from the
// first column; bold and units stripped); a missing column is an error.
func TestPlotSeries(t *testing.T) {
	report := "## r\n\n### Snapshot vs dirty size (VMM)\n\n| guest dirtied | snapshot: pause + write + resume | dd of the same MiB, conv=fsync |\n|---|---|---|\n| 0 MiB | 707.7 ms | 188.4 ms (3.0 MiB) |\n| 8 MiB | **1982.5 ms** | 1223.5 ms |\n"
	sp := plotSpecs[0]
	s, err := sp.series(parseTables(report + "\n## An earlier run\n\n### Snapshot vs dirty size (VMM)\n\n| guest dirtied | snapshot: pause + write + resume | dd of the same MiB, conv=fsync |\n|---|---|---|\n| 64 MiB | 1 ms | 1 ms |\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || len(s[0]) != 2 || s[0][1] != (point{8, 1982.5}) || s[1][0] != (point{0, 188.4}) {
		t.Errorf("series = %v", s)
	}
	sp.ys = []string{"nosuch"}
	if _, err := sp.series(parseTables(report)); err == nil {
		t.Error("a missing column gave no error")
	}
	if img := lineChart(s); img.Bounds().Dx() != chartW {
		t.Errorf("chart is %v", img.Bounds())
	}
	if got := niceCeil(1401); got != 2000 {
		t.Errorf("niceCeil(1401) = %v; want 2000", got)
	}
}

// TestLabFault: only the lab's signatures, and only in the lab, make the
// tree's part run again.
func TestLabFault(t *testing.T) {
	reset := errors.New(`new: after restore: agent hostname: wait: socket error: EOF (the vmm ended: guest shut down (reset))`)
	stall := errors.New(`clone 20: new: after restore: agent not serving`)
	svm := fmt.Errorf("%w (the lab's stall: a guest's vCPU at 0xffffffff815d159c __svm_vcpu_run)",
		errors.New(`new c=10: new: after restore: agent ctl: no answer: read unix: i/o timeout`))
	other := errors.New(`snapshot: no space left on device`)
	timeout := errors.New(`new c=10: new: after restore: agent ctl: no answer: read unix: i/o timeout`)
	t.Setenv("SANDFS_LAB", "")
	if labFault(reset) {
		t.Errorf("outside the lab, a reset is a failure like any other")
	}
	t.Setenv("SANDFS_LAB", "1")
	if !labFault(reset) || !labFault(stall) || !labFault(svm) {
		t.Errorf("in the lab, a reset, a restored guest that never served and one at the lab kernel's SVM code are its faults")
	}
	for _, err := range []error{other, timeout} {
		if labFault(err) {
			t.Errorf("%v taken for a fault of the lab", err)
		}
	}
}

// TestHopThreads runs the hop benchmark's thread measurement: every
// message comes back whole, and a round trip takes some time.
func TestHopThreads(t *testing.T) {
	initClock()
	d, err := hopThreads(1000)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || d > time.Second {
		t.Fatalf("round trip %v", d)
	}
}
