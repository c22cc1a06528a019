package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/tools/lab"
	"sandfs/vmm/probe"
)

func init() {
	register("lab", "run a command (or the daemon) inside the development VM: lab [-v] -- CMD...", runLab)
	register("probe", "report whether this host runs sandfs guests natively or needs the lab", runProbe)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runLab(args []string) int {
	serve := len(args) > 0 && args[0] == "serve"
	if serve {
		args = args[1:]
	}
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	var env, fwd multiFlag
	fs.Var(&env, "e", "KEY=VALUE for the command (repeatable)")
	fs.Var(&fwd, "p", "forward host 127.0.0.1:HOST to guest port GUEST, as HOST:GUEST (repeatable)")
	dir := fs.String("C", "", "working directory inside the lab (default: the current directory mapped under /opt/sandfs)")
	mem := fs.Int("mem", 0, "guest RAM in MiB (default $SANDFS_LAB_MEM or 6144)")
	cpus := fs.Int("cpus", 0, "vCPUs (default $SANDFS_LAB_CPUS or 2)")
	timeout := fs.Duration("timeout", 0, "kill the lab after this long (0: never)")
	stdin := fs.Bool("i", false, "pass stdin to the command (as a pipe, not a terminal; default /dev/null)")
	verbose := fs.Bool("v", false, "show progress and the kernel console on stderr")
	kernel := fs.String("kernel", "", "the lab's kernel (default build/vmlinuz; build/vmlinuz-6.12 is a newer host kernel: tools/kernel/build.sh)")
	stateGiB := fs.Int("state-size", lab.DefaultStateSize>>30, "-disk's size in GiB (sparse; a smaller image is grown)")
	disk := fs.String("disk", "", "attach this ext4 image on the host (made if missing; checked, locked: one lab at a time) as the virtio-blk drive with serial "+lab.StateSerial+"; lab serve keeps the daemon's state on it (default there: $SANDFS_LAB_STATE, else state.ext4 under the cache dir), a command mounts it itself, e.g. mount /dev/vda /mnt (default there: none)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: sandfs lab [flags] -- CMD [ARGS...]\n       sandfs lab serve [flags] [-- SERVE-ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	forwards, err := parseForwards(fwd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandfs lab: %v\n", err)
		return 2
	}
	repo, err := lab.FindRepo()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandfs %v\n", err)
		return 125
	}
	o := lab.Options{Repo: repo, Args: fs.Args(), Env: env, Dir: labDir(repo, *dir),
		MemMiB: *mem, CPUs: *cpus, Forward: forwards, Timeout: *timeout}
	if *kernel != "" {
		if o.Kernel, err = filepath.Abs(*kernel); err != nil {
			fmt.Fprintf(os.Stderr, "sandfs lab: %v\n", err)
			return 2
		}
	}
	if *verbose {
		o.Log = os.Stderr
		o.Console = os.Stderr
	}
	if serve && *disk == "" {
		*disk = lab.DefaultStateImage()
	}
	if *disk != "" {
		d, err := lab.OpenStateDisk(*disk, int64(*stateGiB)<<30, func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, "sandfs lab: "+f+"\n", a...)
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandfs %v\n", err)
			return 125
		}
		defer d.Close()
		o.StateDisk = d.Path
	}
	if serve {
		if err := serveInLab(&o); err != nil {
			fmt.Fprintf(os.Stderr, "sandfs %v\n", err)
			return 125
		}
		return serveLab(o, *verbose)
	}
	if len(o.Args) == 0 {
		fs.Usage()
		return 2
	}
	if *stdin {
		o.Stdin = os.Stdin
	}
	return bootLab(o, *verbose)
}

// parseForwards parses -p's HOST:GUEST port pairs.
func parseForwards(fwd []string) ([]lab.Forward, error) {
	var forwards []lab.Forward
	for _, f := range fwd {
		h, g, ok := strings.Cut(f, ":")
		hp, err1 := strconv.Atoi(h)
		gp, err2 := strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad -p, want HOST:GUEST %q", f)
		}
		forwards = append(forwards, lab.Forward{Host: hp, Guest: gp})
	}
	return forwards, nil
}

// labDir is the command's working directory in the lab: dir if given,
// else the current directory's place under /opt/sandfs, else /opt/sandfs.
func labDir(repo, dir string) string {
	if dir != "" {
		return dir
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(repo, wd); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(lab.GuestRepo, rel)
		}
	}
	return lab.GuestRepo
}

// serveInLab makes o run the daemon inside the lab (lab serve): o.Args
// become extra arguments of sandfs serve, whose 9P port is forwarded to
// the host's $SANDFS_LAB_9P_PORT (default 5640) and whose token the host
// finds in the repo (lab.ServeToken).
func serveInLab(o *lab.Options) error {
	p9 := envPort("SANDFS_LAB_9P_PORT", 5640)
	o.Forward = append(o.Forward, lab.Forward{Host: p9, Guest: 5640})
	tokenFile, err := lab.ServeToken(o.Repo)
	if err != nil {
		return err
	}
	guestToken := lab.GuestRepo + "/" + lab.ServeTokenPath
	o.Args = lab.ServeCommand(append([]string{lab.GuestRepo + "/bin/sandfs", "serve", "--listen", "tcp:0.0.0.0:5640",
		"--token-file", guestToken}, o.Args...))
	fmt.Fprintf(os.Stderr, "sandfs lab serve: daemon inside the lab, its state on %s; 9P at 127.0.0.1:%d (token in %s); Ctrl-C stops\n",
		o.StateDisk, p9, tokenFile)
	return nil
}

// serveStopGrace bounds a lab serve's orderly stop (its running
// sandboxes paused to disk, the daemon ended, the state disk unmounted)
// before QEMU is killed.
const serveStopGrace = 2 * time.Minute

// serveLab runs the lab serve command o until it ends or SIGINT/SIGTERM,
// which close its stdin (the orderly stop, lab.ServeCommand) and end QEMU
// only if the lab is still up serveStopGrace later.
func serveLab(o lab.Options, verbose bool) int {
	stopR, stopW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandfs lab serve: %v\n", err)
		return 125
	}
	defer stopR.Close()
	o.Stdin = stopR
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		fmt.Fprintln(os.Stderr, "sandfs lab serve: stopping: running sandboxes are paused to disk, then the daemon and the lab end")
		stopW.Close()
		select {
		case <-time.After(serveStopGrace):
			fmt.Fprintf(os.Stderr, "sandfs lab serve: the lab did not stop within %v; killing it\n", serveStopGrace)
			cancel()
		case <-done:
		}
	}()
	return runLabCtx(ctx, o, verbose)
}

// bootLab runs o in the lab until it ends or SIGINT/SIGTERM, and returns
// the command's exit status (125 if the lab failed).
func bootLab(o lab.Options, verbose bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runLabCtx(ctx, o, verbose)
}

// runLabCtx runs o in the lab until it ends or ctx does, and returns the
// command's exit status (125 if the lab failed).
func runLabCtx(ctx context.Context, o lab.Options, verbose bool) int {
	start := time.Now()
	res, err := lab.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandfs %v\n", err)
		if errors.Is(err, lab.ErrNoStatus) && res.ConsoleLog != "" {
			fmt.Fprintf(os.Stderr, "sandfs lab: full console log %s\n", res.ConsoleLog)
		}
		return 125
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "lab: exit %d, total %.1fs\n", res.Status, time.Since(start).Seconds())
	}
	return res.Status
}

func envPort(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 && v < 65536 {
		return v
	}
	return def
}

func runProbe(args []string) int {
	p := probe.Probe()
	fmt.Println(p)
	if len(args) > 0 && args[0] == "-q" {
		if p.Native {
			return 0
		}
		return 1
	}
	return 0
}
