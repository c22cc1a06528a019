package bench

import (
	"fmt"
	"sort"
)

// worldsRows are the report's rows: worlds.py's row, what it does, its
// unit (bytes: MB/s, else operations/s).
var worldsRows = []struct {
	key, what, unit string
}{
	{"walk", "metadata: walk the tree (readdir, lstat of every entry), cold", "entries/s"},
	{"stat", "metadata: lstat of every small file by path, cold", "stats/s"},
	{"small-read", "small-file reads (open, read, close), cold", "files/s"},
	{"small-read-warm", "small-file reads, warm (after the cold passes)", "files/s"},
	{"big-read", "large sequential read (1 MiB reads), cold", "MB/s"},
	{"big-read-warm", "large sequential read, warm", "MB/s"},
	{"create", "small-file create (4 KiB each, no fsync)", "files/s"},
	{"copy-up", "small write (100 B) to an existing file: a copy-up on /workspace", "files/s"},
}

// rate is the row's rate for one target: the median pass's (by time).
func (res worldsResult) rate(row, label, unit string) (float64, bool) {
	ms := res[row][label]
	if len(ms) == 0 {
		return 0, false
	}
	c := append([]measure(nil), ms...)
	sort.Slice(c, func(i, j int) bool { return c[i].secs < c[j].secs })
	m := c[(len(c)-1)/2]
	if unit == "MB/s" {
		return float64(m.bytes) / m.secs / 1e6, true
	}
	return float64(m.count) / m.secs, true
}

// worldsTable is the report's table: each target's rate and the ratios
// of /workspace to the guest's disk and to QEMU's virtio-9p.
func worldsTable(res worldsResult, qemu bool) *table {
	t := &table{title: "/workspace (sandfs virtio-9p) against the guest's own ext4 disk and QEMU's virtio-9p",
		head: []string{"operation", "unit", "guest ext4", "/workspace", "QEMU virtio-9p", "**/workspace ÷ ext4**", "**/workspace ÷ QEMU 9p**"}}
	cell := func(v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.4g", v)
	}
	div := func(a, b float64, ok bool) string {
		if !ok || b <= 0 {
			return "-"
		}
		if a/b < 0.1 { // two significant digits, not 0.00
			return fmt.Sprintf("%.2g", a/b)
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, row := range worldsRows {
		e, eok := res.rate(row.key, "ext4", row.unit)
		w, wok := res.rate(row.key, "workspace", row.unit)
		q, qok := res.rate(row.key, "qemu9p", row.unit)
		t.add(row.what, row.unit, cell(e, eok), cell(w, wok), cell(q, qok), div(w, e, eok && wok), div(w, q, qok && wok))
	}
	t.notes = append(t.notes,
		"Cold rows drop the guest's page cache first (sync; drop_caches 3), so ext4 reads come from the sandbox's disk (virtio-blk, its layer file in the host's page cache) and both 9P mounts from the host's files; warm rows come from each guest's caches (both 9P mounts are cache=loose with synchronous writes, as /workspace is: docs/worlds.md, Cache mode). Every row is the median of "+fmt.Sprint(worldsPasses)+" passes (each pass of the create and copy-up rows on files of its own).",
		"sandfs: the daemon's world (fs/ninep, iounit 0) through the VMM's virtio-9p device (vmm/virtio/p9, trans=virtio, msize 500 KiB) over a lower on the lab's tmpfs; the ext4 tree, of the same shape, is made by worlds.py in /root/bench of the same guest (the sandbox's disk).")
	if qemu {
		t.notes = append(t.notes, "QEMU: microvm, same kernel, image, memory and vCPU count; `-fsdev local,security_model=none` of another copy of the tree on the same tmpfs, `virtio-9p-device`, mounted 9P2000.L, cache=loose and sync as /workspace, msize 512 KiB (the kernel's virtio transport lowers it to its maximum).")
	}
	return t
}
