package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"sandfs/ctl"
	sfs "sandfs/fs"
	"sandfs/fs/ctlfs"
	"sandfs/fs/fusefs"
	"sandfs/fs/ninep"
	"sandfs/snapshot"
	"sandfs/tools/tsc"
	"sandfs/vmm/probe"
	"sandfs/vmm/vmmproc"
)

func init() {
	register("serve", "run the daemon: the file tree over 9P (and FUSE)", runServe)
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// besideBinary is rel in the checkout that holds this executable
// (<repo>/bin/sandfs, so <repo>/rel): make build and the lab's
// /opt/sandfs both have that layout. "" if the executable is unknown.
func besideBinary(rel string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), rel)
}

// envOr returns $key, or def when unset or empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func runServe(args []string) int {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	state := fl.String("state", "/var/lib/sandfs", "state directory")
	var listens listFlag
	fl.Var(&listens, "listen", "9P listener, unix:PATH or tcp:HOST:PORT (repeatable; default unix:/run/sandfs/sandfs.sock)")
	mnt := fl.String("mount", "/mnt/sandfs", "also mount the tree with FUSE at this directory (created if missing); \"\" for none")
	tokenFile := fl.String("token-file", "", "file holding the TCP token (default: $SANDFS_TOKEN, else STATE/token, generated if missing)")
	kernel := fl.String("kernel", envOr("SANDFS_KERNEL", besideBinary("build/vmlinuz")), "guest kernel for the VMM runtime (default: $SANDFS_KERNEL, else build/vmlinuz of the checkout holding this binary)")
	templates := fl.String("templates", envOr("SANDFS_TEMPLATES", besideBinary("build/templates")), "template directory for the VMM runtime (default: $SANDFS_TEMPLATES, else build/templates beside build/vmlinuz)")
	debug := fl.Bool("debug", false, "log at debug level")
	group := fl.String("group", "", "group (name or gid) whose members may create sandboxes: it owns /ctl, /clone and the unix sockets (default: the daemon's group)")
	e2bAddr := fl.String("e2b", "", "also serve the E2B API (REST and envd, package e2b) on this TCP address, e.g. 127.0.0.1:3000; \"\" for none")
	e2bKeys := fl.String("e2b-keys", "", "E2B API keys, one a line: KEY UID[:GID], the tree owner it acts as (0 for root; required). Default: $SANDFS_E2B_KEY, else STATE/e2b-key, generated and printed if missing; both the operator's, acting as root")
	resolver := fl.String("resolver", os.Getenv("SANDFS_RESOLVER"), "the host's DNS resolver, HOST:PORT (UDP), that sandboxes' resolvers forward allowed names to (default: $SANDFS_RESOLVER, else the first nameserver of /etc/resolv.conf)")
	var retain ctl.Retention
	fl.IntVar(&retain.Keep, "snapshot-keep", 0, "keep at most this many snapshots of each sandbox, the newest; older ones are removed as rm removes them, except one a sandbox stands on (docs/snapshots.md \"Retention\"); 0: no limit")
	fl.DurationVar(&retain.MaxAge, "snapshot-max-age", 0, "remove snapshots older than this (e.g. 168h), with the same exceptions; 0: no limit")
	guestOpens := fl.Int("guest-open-files", ninep.DefaultOpenBound, "files a guest may hold open at a time on its /workspace (its 9P connection's bound on open fids; past it, EMFILE), 1-1048576")
	vmmUIDs := ctl.DefaultVMMIDs
	fl.Var(&vmmUIDs, "vmm-uids", "host uids (and gids) FIRST-LAST given one per sandbox to its VMM (as root; none may belong to a user, group or subordinate range)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	// The phases of a snapshot the daemon logs count the TSC where the
	// kernel names its frequency (the lab: its clock moves in 4 ms steps).
	if clock, ok := tsc.CmdlineClock(); ok {
		snapshot.SetClock(clock)
	}
	mountGiven := false
	fl.Visit(func(f *flag.Flag) { mountGiven = mountGiven || f.Name == "mount" })
	if fl.NArg() != 0 || retain.Keep < 0 || retain.MaxAge < 0 || *guestOpens < 1 || *guestOpens > ninep.MaxOpenBound {
		fmt.Fprintln(os.Stderr, "usage: sandfs serve [flags]")
		fl.PrintDefaults()
		return 2
	}
	if len(listens) == 0 {
		listens = listFlag{"unix:/run/sandfs/sandfs.sock"}
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := serve(log, serveConfig{
		state: *state, listens: listens, mount: *mnt, mountOptional: !mountGiven, tokenFile: *tokenFile,
		kernel: *kernel, templates: *templates, vmmUIDs: vmmUIDs, group: *group,
		e2b: *e2bAddr, e2bKeys: *e2bKeys, resolver: *resolver, retain: retain, guestOpens: *guestOpens,
	}); err != nil {
		log.Error("serve: " + err.Error())
		return 1
	}
	return 0
}

type serveConfig struct {
	state         string
	listens       []string
	mount         string
	mountOptional bool // the default mount point: skipped (with a warning) if FUSE is unavailable
	tokenFile     string
	kernel        string
	templates     string
	vmmUIDs       ctl.IDRange
	group         string // --group, "" for none
	resolver      string // --resolver, "" for /etc/resolv.conf's
	e2b           string // --e2b address, "" for none
	e2bKeys       string // --e2b-keys file
	retain        ctl.Retention
	guestOpens    int // --guest-open-files; 0: ninep's default
}

// serve runs the daemon until SIGINT or SIGTERM: the control plane and
// its runtime, the tree, the 9P listeners and the FUSE mount; then it
// stops them in the reverse order. Sandboxes' VMMs keep running (also
// when the daemon is killed): the next serve on the state re-attaches
// them (ctl.VMMRuntime.Detached).
func serve(log *slog.Logger, c serveConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := os.MkdirAll(c.state, 0o700); err != nil {
		return err
	}
	if n, err := raiseFileLimit(); err != nil {
		log.Warn("serve: open files limit", "limit", n, "err", err)
	} else {
		log.Info("serve: open files limit", "limit", n)
	}
	opener, err := ctlfs.WorldOpener(c.guestOpens)
	if err != nil {
		return err
	}
	rt, noRuntime, err := vmmRuntime(log, c)
	if err != nil {
		return err
	}
	plane, err := ctl.Open(c.state, rt, log)
	if err != nil {
		return fmt.Errorf("state %s: %w", c.state, err)
	}
	plane.SetNoRuntimeReason(noRuntime)
	if c.retain != (ctl.Retention{}) {
		plane.SetRetention(c.retain)
		log.Info("serve: snapshot retention", "keep", c.retain.Keep, "max_age", c.retain.MaxAge)
	}
	plane.SetWorldOpener(opener)
	defer plane.Close()
	tree := ctlfs.New(plane, log)
	gid := -1
	if c.group != "" {
		if gid, err = lookupGroup(c.group); err != nil {
			return err
		}
		tree.SetGroup(uint32(gid))
		log.Info("serve: creators' group", "group", c.group, "gid", gid)
	}

	ls := &listeners{errc: make(chan error, len(c.listens)+1)}
	defer ls.removeSockets()
	srv := ninep.NewServer(tree.Root(), log)
	if err := ls.start(ctx, log, c, srv, gid); err != nil {
		return err
	}
	if c.e2b != "" {
		if err := startE2B(ctx, log, c, srv, &ls.wg, ls.errc); err != nil {
			stop()
			ls.wg.Wait()
			return err
		}
	}
	m, err := mountIfAsked(log, c, tree.Root())
	if err != nil {
		stop()
		ls.wg.Wait()
		return err
	}

	select {
	case <-ctx.Done():
		log.Info("serve: signal received, shutting down")
	case err = <-ls.errc:
		log.Error("serve: " + err.Error())
	}
	stop()
	if m != nil {
		if uerr := m.Unmount(); uerr != nil {
			log.Error("serve: unmount", "dir", c.mount, "err", uerr)
		} else {
			log.Info("serve: FUSE unmounted", "dir", c.mount)
		}
	}
	ls.wg.Wait()
	return err
}

// vmmRuntime returns the VMM runtime, which needs a host that runs
// guests natively (the host probe's verdict) and the guest kernel.
// Without either there is no runtime (nil), and noRuntime says why: the
// plane then fails `new` with ENODEV and that text.
func vmmRuntime(log *slog.Logger, c serveConfig) (rt ctl.Runtime, noRuntime string, err error) {
	verdict := probe.Cached()
	log.Info("serve: host probe: "+verdict.String(), "mode", verdict.Mode())
	if _, err := os.Stat(c.kernel); !verdict.Native {
		noRuntime = "this host cannot run guests natively (" + verdict.Reason + "); run sandfs in the lab: make run"
	} else if err != nil {
		noRuntime = "no guest kernel: " + err.Error()
	} else {
		vr := ctl.NewVMMRuntime(c.kernel, c.templates, log)
		vr.Binary = vmmproc.FindBinary() // bin/sandfs-vmm; "": this binary's `vmm`
		vr.CacheDir = filepath.Join(c.state, "templates")
		vr.Detached = true // sandboxes outlive the daemon; the next one re-attaches them
		// One VMM process started ahead (vmmproc.Spares); it ends with
		// the daemon (its socket closes).
		if sp, err := vmmproc.NewSpares(vr.Binary, vr.Jail.Namespaces, vr.CgroupParent, 1); err != nil {
			log.Warn("serve: no spare VMM processes", "err", err)
		} else {
			vr.Spares = sp
		}
		withNetworks(log, vr, c.resolver)
		if err := vr.UseIDs(c.vmmUIDs); err != nil {
			return nil, "", err
		}
		log.Info("serve: VMM runtime", "kernel", c.kernel, "templates", c.templates, "vmm", vmmBinaryName(vr.Binary))
		return vr, "", nil
	}
	log.Warn("serve: no VMM runtime, sandboxes cannot be created: " + noRuntime)
	return nil, noRuntime, nil
}

// vmmBinaryName is what the log says runs as each VMM: bin, else this
// binary's `vmm` subcommand.
func vmmBinaryName(bin string) string {
	if bin != "" {
		return bin
	}
	return "sandfs vmm (no " + vmmproc.BinaryName + " beside this binary: make build)"
}

// listeners are the daemon's 9P listeners, each served by its own
// goroutine (counted in wg) until the context given to start ends; a
// listener that fails sends its error to errc.
type listeners struct {
	wg      sync.WaitGroup
	errc    chan error // buffered: one per listener
	sockets []string   // unix socket files, removed by removeSockets
}

// start opens every listener of c and serves srv on it; TCP listeners
// ask for the token (loadToken), unix sockets belong to group gid
// (listen). On an error the listeners already started go on until ctx
// ends.
func (ls *listeners) start(ctx context.Context, log *slog.Logger, c serveConfig, srv *ninep.Server, gid int) error {
	var token string
	for _, l := range c.listens {
		if strings.HasPrefix(l, "tcp:") {
			var err error
			if token, err = loadToken(log, c.state, c.tokenFile); err != nil {
				return err
			}
			break
		}
	}
	for _, addr := range c.listens {
		l, err := listen(addr, gid)
		if err != nil {
			return err
		}
		tok := ""
		if strings.HasPrefix(addr, "tcp:") {
			tok = token
		} else {
			ls.sockets = append(ls.sockets, strings.TrimPrefix(addr, "unix:"))
		}
		log.Info("serve: 9P listening", "addr", addr, "token", tok != "")
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			if err := srv.Serve(ctx, l, tok); err != nil {
				ls.errc <- fmt.Errorf("9P %s: %w", addr, err)
			}
		}()
	}
	return nil
}

// removeSockets removes the unix socket files of the listeners.
func (ls *listeners) removeSockets() {
	for _, s := range ls.sockets {
		os.Remove(s)
	}
}

// mountIfAsked mounts root with FUSE at c.mount unless that is "". A
// mount at the default place (not given on the command line) that
// fails is only a warning: nil, nil.
func mountIfAsked(log *slog.Logger, c serveConfig, root sfs.Dir) (*fusefs.Mount, error) {
	if c.mount == "" {
		return nil, nil
	}
	m, err := mountTree(c.mount, root, log)
	switch {
	case err != nil && c.mountOptional:
		log.Warn("serve: no FUSE mount (pass --mount DIR to require one, --mount '' to silence this)", "err", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	log.Info("serve: FUSE mounted", "dir", c.mount)
	return m, nil
}

// mountTree mounts root at dir, creating dir and clearing a stale mount a
// crashed daemon left there.
func mountTree(dir string, root sfs.Dir, log *slog.Logger) (*fusefs.Mount, error) {
	if _, err := os.Stat(dir); errors.Is(err, syscall.ENOTCONN) {
		log.Warn("serve: clearing stale mount", "dir", dir)
		syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m, err := fusefs.New(dir, root, fusefs.Options{AllowOther: true, Log: log})
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	return m, nil
}

// listen opens a 9P listener. A unix socket's directory is created and a
// stale socket file (nobody answering) replaced; the socket is mode 0660,
// its group gid unless gid is -1, so that only the creators' group
// connects (the daemon checks every request of those who do).
func listen(addr string, gid int) (net.Listener, error) {
	network, address, ok := strings.Cut(addr, ":")
	switch {
	case !ok:
	case network == "tcp":
		return net.Listen("tcp", address)
	case network == "unix":
		if err := os.MkdirAll(filepath.Dir(address), 0o755); err != nil {
			return nil, err
		}
		if c, err := net.Dial("unix", address); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another daemon is serving it", addr)
		}
		os.Remove(address)
		l, err := net.Listen("unix", address)
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(address, 0o660); err != nil {
			l.Close()
			return nil, err
		}
		if err := os.Lchown(address, -1, gid); err != nil {
			l.Close()
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("listen: bad address %q (want unix:PATH or tcp:HOST:PORT)", addr)
}

// lookupGroup returns the gid of group name, a group name or a gid.
func lookupGroup(name string) (int, error) {
	if gid, err := strconv.Atoi(name); err == nil && gid >= 0 {
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("--group: %w", err)
	}
	return strconv.Atoi(g.Gid)
}

// minToken is the shortest token serve accepts (the generated ones have
// 32 hex digits).
const minToken = 16

// loadToken returns the TCP token: the content of file if given, else
// $SANDFS_TOKEN (then removed from the environment, so that no child
// inherits it), else the content of STATE/token, which is generated (32
// hex digits, mode 0600) if missing. Never from the command line, which
// every local user can read.
func loadToken(log *slog.Logger, state, file string) (string, error) {
	tok, from := "", file
	if env := os.Getenv("SANDFS_TOKEN"); file == "" && env != "" {
		tok, from = strings.TrimSpace(env), "$SANDFS_TOKEN"
		os.Unsetenv("SANDFS_TOKEN")
	} else {
		if file == "" {
			file = filepath.Join(state, "token")
			if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
				b := make([]byte, 16)
				rand.Read(b)
				if err := os.WriteFile(file, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
					return "", err
				}
			}
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("token: %w", err)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("serve: token file is readable by other users", "file", file, "mode", fi.Mode().Perm())
		}
		tok, from = strings.TrimSpace(string(b)), file
	}
	if tok == "" || strings.ContainsAny(tok, "/ \t\n") {
		return "", fmt.Errorf("token: %s must hold one word without '/'", from)
	}
	if len(tok) < minToken {
		return "", fmt.Errorf("token: %s too short (%d bytes, want at least %d)", from, len(tok), minToken)
	}
	return tok, nil
}
