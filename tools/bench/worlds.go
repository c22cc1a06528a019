package bench

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// worldsPy is the guest's half: python3 in the guest times the file
// operations on each directory it is given (worlds.py).
//
//go:embed worlds.py
var worldsPy []byte

// worldsOpts is the shape of the tree every target reads and writes.
type worldsOpts struct {
	dirs, files, size int // dirs × files small files of size bytes
	big               int // MiB of big.bin
	creates, writes   int // new files created; existing files overwritten (copied up)
	mem               int // guest RAM, MiB
}

// worldsResult holds each measurement's lines, by row then label.
type worldsResult map[string]map[string][]measure

// worldsPasses is how many times worlds.py measures each row (its first
// argument); the report gives the median.
const worldsPasses = 3

// measure is one `R` line of worlds.py.
type measure struct {
	secs         float64
	count, bytes int64
}

// worldsMain is `sandfs bench worlds`: one world over a generated tree,
// one sandbox with it at /workspace, the same operations on /workspace
// and on a copy of the tree on the guest's own ext4 disk, and with -qemu
// on QEMU's virtio-9p share of another copy; the report is the rates and
// their ratios from that one run.
func worldsMain(args []string) int {
	fs := flag.NewFlagSet("bench worlds", flag.ContinueOnError)
	kernel := fs.String("kernel", os.Getenv("SANDFS_KERNEL"), "bzImage (default $SANDFS_KERNEL)")
	templates := fs.String("templates", os.Getenv("SANDFS_TEMPLATES"), "directory of template images (default $SANDFS_TEMPLATES)")
	scratch := fs.String("dir", filepath.Join(os.TempDir(), "wbench"), "scratch directory (the daemon's state, the lowers)")
	o := worldsOpts{}
	fs.IntVar(&o.dirs, "dirs", 20, "directories in the tree")
	fs.IntVar(&o.files, "files", 50, "small files per directory")
	fs.IntVar(&o.size, "size", 4096, "bytes per small file")
	fs.IntVar(&o.big, "big", 64, "MiB of the large file")
	fs.IntVar(&o.creates, "creates", 200, "small files created per pass")
	fs.IntVar(&o.writes, "writes", 200, "existing small files overwritten per pass (a copy-up each on /workspace; 3 passes: at most a third of the files)")
	fs.IntVar(&o.mem, "mem", 512, "guest RAM in MiB")
	qemu := fs.String("qemu", "", "QEMU binary for the virtio-9p comparison (\"\": none)")
	out := fs.String("o", "", "write the markdown report here (default stdout)")
	if err := fs.Parse(args); err != nil {
		return codeUsage
	}
	if *kernel == "" || *templates == "" || o.dirs < 1 || o.files < 1 || o.size < 1 || o.big < 1 ||
		o.writes*worldsPasses > o.dirs*o.files || o.creates < 1 || o.writes < 1 || o.mem < 128 {
		fmt.Fprintln(os.Stderr, "bench worlds: no kernel or templates, or bad sizes")
		return codeUsage
	}
	if err := os.MkdirAll(*scratch, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench worlds:", err)
		return codeError
	}
	defer os.RemoveAll(*scratch)
	clock := initClock()
	r := &run{clock: clock, h: newHost(*kernel, filepath.Join(*templates, "base.ext4"), *scratch), n: 3, log: os.Stderr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	started, load0 := time.Now(), loadavg()
	res, err := r.worlds(ctx, o, *qemu)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worlds:", err)
		return codeError
	}
	report := fmt.Sprintf("## sandfs bench worlds\n\nOne run, %s UTC, %s; %d CPUs, load average at the start %s, at the end %s; guests of %d MiB, 1 vCPU; a tree of %d directories × %d files of %d bytes and a %d MiB file; guest timing (python3 time.perf_counter). Compare the figures with each other (ratios), not with native ones.\n\n",
		started.UTC().Format("2006-01-02 15:04"), where(), runtime.NumCPU(), load0, loadavg(), o.mem, o.dirs, o.files, o.size, o.big)
	report += worldsTable(res, *qemu != "").markdown()
	if *out == "" {
		fmt.Print(report)
		return 0
	}
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench worlds:", err)
		return codeError
	}
	return 0
}

// worlds runs the sandfs guest's measurements, then QEMU's.
func (r *run) worlds(ctx context.Context, o worldsOpts, qemu string) (worldsResult, error) {
	res := worldsResult{}
	lower := filepath.Join(r.h.dir, "lower")
	r.progress("tree: %d × %d files of %d bytes, %d MiB file, in %s", o.dirs, o.files, o.size, o.big, lower)
	if err := makeWorldTree(lower, o); err != nil {
		return nil, err
	}
	if err := r.worldsSandfs(ctx, o, lower, res); err != nil {
		return nil, err
	}
	if qemu == "" {
		return res, nil
	}
	// QEMU's guest on another copy of the tree; measured once more, in a
	// new boot and on a new copy, if that guest stalls (a nested guest
	// the lab stopped: nothing of sandfs runs there).
	var err error
	for try := 1; try <= 2; try++ {
		qlower := filepath.Join(r.h.dir, fmt.Sprintf("qlower%d", try))
		if err = makeWorldTree(qlower, o); err != nil {
			return nil, err
		}
		err = r.worldsQEMU(ctx, qemu, o, qlower, res)
		var st *qemuStall
		if !errors.As(err, &st) || try == 2 {
			break
		}
		r.progress("qemu: %v; measuring again in a new boot", err)
		res.drop("qemu9p")
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	return res, nil
}

// drop forgets label's measures.
func (res worldsResult) drop(label string) {
	for _, byLabel := range res {
		delete(byLabel, label)
	}
}

// makeWorldTree writes dir/bench (the tree) and dir/worlds.py.
func makeWorldTree(dir string, o worldsOpts) error {
	rnd := rand.New(rand.NewSource(1))
	buf := make([]byte, max(o.size, 1<<20))
	rnd.Read(buf)
	for d := 0; d < o.dirs; d++ {
		sub := filepath.Join(dir, "bench", fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for f := 0; f < o.files; f++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%04d", f)), buf[:o.size], 0o644); err != nil {
				return err
			}
		}
	}
	big, err := os.Create(filepath.Join(dir, "bench", "big.bin"))
	if err != nil {
		return err
	}
	for i := 0; i < o.big; i++ {
		if _, err := big.Write(buf[:1<<20]); err != nil {
			big.Close()
			return err
		}
	}
	if err := big.Close(); err != nil {
		return err
	}
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "worlds.py"), worldsPy, 0o644)
}

// worldsSandfs starts the daemon, a world over lower and a sandbox with
// it, copies the tree to the guest's disk and runs worlds.py on both.
func (r *run) worldsSandfs(ctx context.Context, o worldsOpts, lower string, res worldsResult) error {
	r.progress("daemon, world w, sandbox with world=w")
	d, err := r.startDaemon(ctx)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := d.c.WriteMsg("ctl", "world w lower="+lower, "err"); err != nil {
		return fmt.Errorf("world: %w", err)
	}
	if _, err := d.newSandbox("wb", fmt.Sprintf("world=w mem=%dM", o.mem)); err != nil {
		return fmt.Errorf("new: %w", err)
	}
	sh := func(script string, w io.Writer) error { return d.guestSh(ctx, "wb", script, w) }
	if err := d.waitGuest(ctx, "wb", "test -e /workspace/bench/big.bin"); err != nil {
		return err
	}
	r.progress("  guest up; the same tree on the guest's disk (/root/bench, ext4)")
	gen := fmt.Sprintf("python3 /workspace/worlds.py gen /root/bench %d %d %d %d", o.dirs, o.files, o.size, o.big)
	if err := sh(gen, io.Discard); err != nil {
		return err
	}
	r.progress("  measuring (local ext4, then /workspace)")
	watch := watchStall(stallAfter, func(quiet time.Duration) { r.stalled(d, "wb", quiet) })
	pw, finish := r.resultWriter(res, watch.touch)
	cmd := fmt.Sprintf("python3 /workspace/worlds.py %d %d %d ext4=/root/bench workspace=/workspace/bench", worldsPasses, o.creates, o.writes)
	err = sh(cmd, pw)
	finish()
	watch.close()
	return err
}

// resultWriter parses worlds.py's output into res as it comes and shows
// it as progress, calling touch for each line; finish waits for the last
// line to be recorded.
func (r *run) resultWriter(res worldsResult, touch func()) (w io.Writer, finish func()) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			touch()
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "R ") {
				r.progress("  %s", line)
			}
			res.add(line)
		}
		io.Copy(io.Discard, pr)
	}()
	return pw, func() { pw.Close(); <-done }
}

// add records an `R row label secs count bytes` line; others are ignored.
func (res worldsResult) add(line string) bool {
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "R" {
		return false
	}
	secs, err1 := strconv.ParseFloat(f[3], 64)
	count, err2 := strconv.ParseInt(f[4], 10, 64)
	nbytes, err3 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || secs <= 0 {
		return false
	}
	if res[f[1]] == nil {
		res[f[1]] = map[string][]measure{}
	}
	res[f[1]][f[2]] = append(res[f[1]][f[2]], measure{secs, count, nbytes})
	return true
}
