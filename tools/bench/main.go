// Package bench is `sandfs bench snapshots`, `sandfs bench worlds`
// (worlds.go: a world's /workspace in a guest against the guest's own
// disk and QEMU's virtio-9p) and `sandfs bench net` (net.go: a guest's
// TCP flow through its tap with and without the egress filter, and the
// filter's maps' memory). `bench snapshots`: what creating a sandbox from
// a snapshot, snapshotting it, pausing and resuming it cost, measured in
// one run on the host it runs on (the lab, on a host without KVM), beside
// QEMU's own migration-to-file snapshot and restore of the same kernel and
// memory and beside the floor of a restore, as ratios from that run. It
// prints progress on stderr and the tables, markdown, on stdout (or -o).
// Scaffolding, not product: it drives the VMM process (vmmproc.Launch) as
// ctl's runtime does, not jailed.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes, as the other subcommands'.
const (
	codeError = 1
	codeUsage = 2
)

// run is one benchmark run: its settings and where its VMMs live.
type run struct {
	h     *host
	n     int           // repetitions of each sequential measurement
	idle  time.Duration // how long a restored sandbox idles before its memory is read
	log   *os.File
	clock string // what times the figures (initClock)
	tree  bool   // measure through the daemon's tree too
	// daemons counts the daemons started (startDaemon: each its own state).
	daemons int
	load0   string // load average at the start
}

func (r *run) progress(format string, args ...any) {
	fmt.Fprintf(r.log, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

// Main is `sandfs bench ARGS`: snapshots, worlds, net, hop (hop.go), floor or plot.
func Main(args []string) int {
	if len(args) > 0 && args[0] == "plot" {
		return plotMain(args[1:])
	}
	if len(args) > 0 && args[0] == "floor" {
		initClock()
		return floorMain(args[1:])
	}
	if len(args) > 0 && args[0] == "net" {
		return netMain(args[1:])
	}
	if len(args) > 0 && args[0] == "worlds" {
		return worldsMain(args[1:])
	}
	if len(args) > 0 && args[0] == "hop" {
		return hopMain(args[1:])
	}
	if len(args) == 0 || args[0] != "snapshots" {
		fmt.Fprintln(os.Stderr, "usage: sandfs bench snapshots [flags] | sandfs bench worlds [flags] | sandfs bench net [flags] | sandfs bench hop [-n N] | sandfs bench floor SNAPSHOT-DIR | sandfs bench plot REPORT.md DIR")
		return codeUsage
	}
	fs := flag.NewFlagSet("bench snapshots", flag.ContinueOnError)
	kernel := fs.String("kernel", os.Getenv("SANDFS_KERNEL"), "bzImage (default $SANDFS_KERNEL)")
	templates := fs.String("templates", os.Getenv("SANDFS_TEMPLATES"), "directory of template images (default $SANDFS_TEMPLATES)")
	tmpl := fs.String("template", "base", "template image (<templates>/<name>.ext4)")
	scratch := fs.String("dir", filepath.Join(os.TempDir(), "sbench"), "scratch directory (snapshots and disk layers; dd writes here)")
	n := fs.Int("n", 3, "repetitions of each sequential measurement")
	mems := fs.String("mem", "128,2048", "guest RAM sizes in MiB for create-from-snapshot (first and last give the ratio)")
	dirty := fs.String("dirty", "0,8,64,256,1024", "MiB the guest dirties before each snapshot")
	dirtyMem := fs.Int("dirty-mem", 2048, "guest RAM in MiB for the dirty-size snapshots (its /dev/shm is made 75% of it)")
	conc := fs.Int("c", 10, "concurrency of the pause/resume measurement")
	treeC := fs.String("tree", "10,20", "concurrencies of new through the daemon's tree (\"\": skip the tree)")
	qemu := fs.String("qemu", "", "QEMU binary for the side-by-side restore (\"\": none)")
	out := fs.String("o", "", "write the markdown report here (default stdout)")
	if err := fs.Parse(args[1:]); err != nil {
		return codeUsage
	}
	if *kernel == "" || *templates == "" {
		fmt.Fprintln(os.Stderr, "bench snapshots: no kernel or templates (-kernel, -templates or $SANDFS_KERNEL, $SANDFS_TEMPLATES)")
		return codeUsage
	}
	memList, err1 := intList(*mems)
	dirtyList, err2 := intList(*dirty)
	treeList, err3 := intList(*treeC)
	if err1 != nil || err2 != nil || err3 != nil || len(memList) == 0 || *n < 1 || *conc < 1 {
		fmt.Fprintln(os.Stderr, "bench snapshots: bad -mem, -dirty, -n or -c")
		return codeUsage
	}
	if err := os.MkdirAll(*scratch, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "bench snapshots:", err)
		return codeError
	}
	defer os.RemoveAll(*scratch)
	clock := initClock()
	r := &run{clock: clock, h: newHost(*kernel, filepath.Join(*templates, *tmpl+".ext4"), *scratch), n: *n, idle: 2 * time.Second, log: os.Stderr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	r.tree = *treeC != ""
	report, err := r.all(ctx, memList, dirtyList, treeList, *dirtyMem, *conc, *qemu)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench snapshots:", err)
		return codeError
	}
	if *out == "" {
		fmt.Print(report)
		return 0
	}
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench snapshots:", err)
		return codeError
	}
	return 0
}

// all runs every measurement and returns the report.
func (r *run) all(ctx context.Context, mems, dirty, treeC []int, dirtyMem, conc int, qemu string) (string, error) {
	started := time.Now()
	r.load0 = loadavg()
	tmpls := map[int]*template{}
	get := func(mem int) (*template, error) {
		if t := tmpls[mem]; t != nil {
			return t, nil
		}
		r.progress("template %d MiB: cold boot, snapshot", mem)
		t, err := r.h.buildTemplate(ctx, uint64(mem)<<20)
		if err != nil {
			return nil, fmt.Errorf("template %d MiB: %w", mem, err)
		}
		r.progress("  booted to agent in %s", ms(t.boot))
		tmpls[mem] = t
		return t, nil
	}
	var tables []*table
	var creates []*createResult
	for _, m := range mems {
		t, err := get(m)
		if err != nil {
			return "", err
		}
		var qt *qemuTemplate
		if qemu != "" {
			r.progress("qemu template %d MiB: cold boot, migrate to a file", m)
			if qt, err = r.qemuBuild(ctx, qemu, uint64(m)<<20); err != nil {
				return "", fmt.Errorf("qemu %d MiB: %w", m, err)
			}
			r.progress("  booted in %s, saved %s in %s", ms(qt.boot), mib(qt.migBytes), ms(qt.save))
		}
		r.progress("create from snapshot, %d MiB, n=%d", m, r.n)
		c, err := r.benchCreate(ctx, t, qt)
		if err != nil {
			return "", err
		}
		creates = append(creates, c)
	}
	tables = append(tables, createTables(creates)...)
	if len(dirty) > 0 {
		t, err := get(dirtyMem)
		if err != nil {
			return "", err
		}
		r.progress("snapshot vs dirty size, %d MiB guest", dirtyMem)
		ds, err := r.benchDirty(ctx, t, dirty)
		if err != nil {
			return "", fmt.Errorf("dirty: %w", err)
		}
		tables = append(tables, dirtyTable(ds, fsName(t.store)))
	}
	t, err := get(mems[0])
	if err != nil {
		return "", err
	}
	r.progress("pause/resume, %d MiB, c=1 and c=%d", mems[0], conc)
	p, err := r.benchPause(ctx, t, conc)
	if err != nil {
		return "", fmt.Errorf("pause: %w", err)
	}
	tables = append(tables, pauseTable(p, t.mem))
	if r.tree {
		r.progress("through the tree: new at c=1 and c=%v, snapshot, rollback, new from=", treeC)
		tr, err := r.benchTree(ctx, treeC)
		var first error
		if err != nil && labFault(err) {
			first = err
			r.progress("through the tree, once more with a new daemon: the lab's emulation ended a guest (%v)", err)
			tr, err = r.benchTree(ctx, treeC)
		}
		if err != nil {
			return "", fmt.Errorf("tree: %w", err)
		}
		tb := treeTable(tr)
		if first != nil {
			tb.notes = append(tb.notes, fmt.Sprintf("This part ran twice: the lab's nested emulation ended a guest the first time (%v; docs/lab.md), and its figures were dropped.", first))
		}
		tables = append(tables, tb)
	}
	return r.render(tables, started), nil
}

// labFaultText is what the daemon says of a guest that the lab's nested
// emulation reset (tools/lab/faults.sh's labreset) or left without an
// agent after a restore (its SVM stall, docs/lab.md "The dump of a
// stall", which benchTree names from the daemon's log: labstall.go):
// faults of the lab, not of sandfs, which end a run's tree part now and
// then.
var labFaultText = regexp.MustCompile(`triple fault, the guest resets|machine has ended \(reset\)|guest shut down \(reset\)|agent not serving|the lab's stall: `)

// labFault reports whether err, in the lab, is one of its faults.
func labFault(err error) bool {
	return os.Getenv("SANDFS_LAB") != "" && labFaultText.MatchString(err.Error())
}

// render is the report: what ran where, then the tables.
func (r *run) render(tables []*table, started time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## sandfs bench snapshots\n\nOne run, %s UTC, %s; %d CPUs, load average at the start %s, at the end %s; kernel %s, template %s; n=%d per sequential figure; timed with the %s. Compare the figures with each other (ratios), not with native ones.\n\n",
		started.UTC().Format("2006-01-02 15:04"), where(), runtime.NumCPU(), r.load0, loadavg(),
		filepath.Base(r.h.kernel), filepath.Base(r.h.rootfs), r.n, r.clock)
	for _, t := range tables {
		b.WriteString(t.markdown())
		b.WriteString("\n")
	}
	return b.String()
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// where says whether this is the lab.
func where() string {
	if os.Getenv("SANDFS_LAB") != "" {
		return "in the lab (nested KVM under QEMU TCG)"
	}
	return "on this host"
}

// fsName names the file system holding dir (by its statfs magic).
func fsName(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case 0x01021994:
		return "tmpfs"
	case 0xef53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683e:
		return "btrfs"
	}
	return fmt.Sprintf("statfs type %#x", st.Type)
}

// intList parses "1,2,3".
func intList(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		v = append(v, i)
	}
	return v, nil
}
