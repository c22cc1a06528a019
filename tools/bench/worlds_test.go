package bench

import (
	"strings"
	"testing"
)

// TestWorldsResult: worlds.py's lines become rates (the median pass by
// time; MB/s for bytes) and ratios; other lines and bad numbers are
// ignored.
func TestWorldsResult(t *testing.T) {
	res := worldsResult{}
	for _, line := range []string{
		"# ext4: /root/bench, 60 files",
		"R stat ext4 0.5 100 0", "R stat ext4 0.1 100 0", "R stat ext4 0.2 100 0",
		"R stat workspace 2 100 0", "R walk ext4 1 1000 0", "R walk workspace 1 7 0",
		"R big-read workspace 2 1 4000000",
		"R stat ext4 x 1 0", "R stat ext4 0 1 0", "R stat ext4 1 1",
	} {
		res.add(line)
	}
	if got := len(res["stat"]["ext4"]); got != 3 {
		t.Fatalf("%d ext4 stat lines recorded, want 3", got)
	}
	if r, ok := res.rate("stat", "ext4", "stats/s"); !ok || r != 500 {
		t.Errorf("ext4 stat rate %v, %v; want 500 (the median pass, 0.2 s)", r, ok)
	}
	if r, _ := res.rate("big-read", "workspace", "MB/s"); r != 2 {
		t.Errorf("big-read rate %v MB/s, want 2", r)
	}
	md := worldsTable(res, false).markdown()
	if !strings.Contains(md, "| entries/s | 1000 | 7 | - | 0.007 | - |") {
		t.Errorf("a small ratio is not shown to two significant digits:\n%s", md)
	}
	if !strings.Contains(md, "| metadata: lstat of every small file by path, cold | stats/s | 500 | 50 | - | 0.10 | - |") || !strings.Contains(md, "| large sequential read (1 MiB reads), cold | MB/s | - | 2 | - | - | - |") {
		t.Errorf("table:\n%s", md)
	}
}
