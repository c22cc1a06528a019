package ctl

// How VMMRuntime starts a sandbox from its template's snapshot: the
// cache entry (tmplcache.go) is built by one cold boot of the template,
// then every sandbox restores it with a disk layer of its own and gets
// the wall clock, its hostname and fresh entropy from the host before it
// is reported running.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// Booter is optionally implemented by a Machine that knows how it came
// up; Boot is shown in status as boot=<value>: "cold" (the kernel
// booted) or "restore" (from a template snapshot). It is called with a
// lock held and must return at once.
type Booter interface {
	Boot() string
}

var _ Booter = (*vmmMachine)(nil)

// Boot implements Booter.
func (m *vmmMachine) Boot() string { return m.boot }

// templateCache returns the runtime's template snapshot cache, in
// CacheDir.
func (r *VMMRuntime) templateCache() *tmplCache {
	first := false
	r.cacheOnce.Do(func() { r.cache, first = &tmplCache{dir: r.CacheDir}, true })
	if first {
		r.gcTemplates() // what a daemon that rebuilt its images left
	}
	return r.cache
}

// tmplHostname is the host name a template boots with (on its command
// line, which its restores must repeat); refreshGuest then sets each
// sandbox's own.
const tmplHostname = "template"

// agentWait bounds how long a cold boot may take to a serving agent, and
// a restored agent to answer.
const agentWait = 3 * time.Minute

// startFromTemplate starts sandbox s as a restore of its template's
// snapshot for s's shape, building that snapshot first if absent.
func (r *VMMRuntime) startFromTemplate(ctx context.Context, s Spec) (Machine, error) {
	cfg, err := r.config(s, tmplHostname)
	if err != nil {
		return nil, err
	}
	tmpl := s.Template
	if tmpl == "" {
		tmpl = "base"
	}
	key, err := r.currentKey(tmpl, cfg.MemBytes, cfg.CPUs)
	if err != nil {
		return nil, Errorf(syscall.EIO, "new: template %s: %v", msg.Cite(tmpl), err)
	}
	entry, built, err := r.templateCache().get(ctx, key, func(ctx context.Context, dir string) error {
		return r.buildTemplate(ctx, s, dir, tmplSnapID(key))
	})
	if err != nil {
		return nil, Errorf(Errno(err), "new: template %s snapshot: %s", msg.Cite(tmpl), errText(err))
	}
	if built {
		r.Log.Info("template snapshot built", "template", tmpl, "entry", entry)
		r.gcTemplates() // the entries it replaces, if any
	}
	start := time.Now()
	if err := prepareRunDir(s.Dir, cfg.Jail.UID); err != nil {
		return nil, err
	}
	work := WorkDir(s)
	for _, n := range []string{entryLayer, entryLayer + ".map"} {
		if err := CopyLayerFile(filepath.Join(work, n), filepath.Join(entry, n), cfg.Jail.UID); err != nil {
			return nil, Errorf(syscall.EIO, "new: disk layer: %v", err)
		}
	}
	if err := copyLog(filepath.Join(s.Dir, "console"), filepath.Join(entry, entryConsole)); err != nil {
		return nil, Errorf(syscall.EIO, "new: console: %v", err)
	}
	// The snapshot, linked into the VMM's own store: its first
	// snapshot is a delta over it (vmmsnap.go).
	id := tmplSnapID(key)
	if err := linkChain(filepath.Join(work, workSnaps), filepath.Join(entry, id), cfg.Jail.UID); err != nil {
		return nil, Errorf(syscall.EIO, "new: template snapshot: %v", err)
	}
	// cfg is s's, and the run directory is laid out: launch, not
	// startFrom (which would stat the template and kernel and lay out
	// the directory again).
	ph := restorePhases{start: start, laid: time.Now()}
	vm, err := r.launch(ctx, s.ID, s.Config, cfg, filepath.Join(work, workSnaps, id))
	if err != nil {
		return nil, err
	}
	ph.launched = time.Now()
	vm.last, vm.base = id, filepath.Join(entry, id)
	if ph.via, err = vm.refresh(ctx, s.ID); err != nil {
		vm.giveUp(r.Log, "new", s.ID, err)
		return nil, Errorf(Errno(err), "new: after restore: %s", errText(err))
	}
	r.Log.Info("restored: agent serving", append([]any{"id", s.ID}, ph.attrs()...)...)
	return vm, nil
}

// restorePhases times a restore to its agent serving, for its log line:
// from start, the run directory laid out, the VMM launched, then the
// guest refreshed (refreshGuest, via which way).
type restorePhases struct {
	start, laid, launched time.Time
	via                   string
}

// attrs are the log attributes: after (the whole), layout, launch,
// refresh, via.
func (ph restorePhases) attrs() []any {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return []any{"after", ms(time.Since(ph.start)), "layout", ms(ph.laid.Sub(ph.start)),
		"launch", ms(ph.launched.Sub(ph.laid)), "refresh", ms(time.Since(ph.launched)), "via", ph.via}
}

// buildTemplate boots the template cold for s's shape (as s's uid, in
// dir/r), waits for its agent, pauses it, saves a full snapshot and
// stops it, then moves the snapshot and the disk layer it froze into
// dir, owned by root and readable by every sandbox's VMM.
func (r *VMMRuntime) buildTemplate(ctx context.Context, s Spec, dir, id string) error {
	b := s
	b.ID, b.Dir = "template", filepath.Join(dir, "r")
	b.Group, b.Member = "", "" // the template's machine is in no group
	if err := os.Mkdir(b.Dir, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(b.Dir)
	m, err := r.startFrom(ctx, b, "", tmplHostname, false) // dies with the daemon: a build is not resumed
	if err != nil {
		return err
	}
	vm := m.(*vmmMachine)
	defer func() { vm.p.Kill(); vm.p.Wait() }()
	start := time.Now()
	wctx, cancel := vm.untilEnd(ctx)
	err = waitAgent(wctx, vm.uds)
	cancel()
	if err != nil {
		// The build is given up and its directory goes: the VMM's state
		// dump (when it makes one: vmmproc.Process.AskDump), logged
		// here, is the only record of where the guest stopped.
		vm.p.AskDump()
		r.Log.Warn("template boot: agent not serving", append([]any{"template", s.Template, "err", err}, vm.LastWords()...)...)
		return fmt.Errorf("template boot: %w", vm.whyEnded(err))
	}
	r.Log.Info("template booted: agent serving", "template", s.Template, "after", time.Since(start).Round(time.Millisecond))
	if err := vm.Pause(ctx); err != nil {
		return err
	}
	work := WorkDir(b)
	if err := vm.p.Save(ctx, filepath.Join(work, id)); err != nil {
		return err
	}
	if err := vm.Stop(ctx); err != nil { // writes the layer's map
		return err
	}
	<-vm.Done()
	for _, n := range []string{id, entryLayer, entryLayer + ".map"} {
		if err := os.Rename(filepath.Join(work, n), filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	// The boot log (root's: opened by Launch outside work/), for every
	// restored sandbox's console to start with.
	if err := copyLog(filepath.Join(dir, entryConsole), filepath.Join(b.Dir, "console")); err != nil {
		return err
	}
	return shareTree(dir, b.Dir)
}

// shareTree makes everything under dir but skip root's, directories 0755
// and files 0644. Anything else than a regular file or a directory (a
// symlink left in the VMM's work directory) is an error.
func shareTree(dir, skip string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		mode := os.FileMode(0o644)
		switch {
		case d.IsDir():
			mode = 0o755
		case !d.Type().IsRegular():
			return fmt.Errorf("template snapshot: %s is a %s", msg.Cite(p), d.Type())
		}
		if err := os.Lchown(p, 0, 0); err != nil {
			return err
		}
		return os.Chmod(p, mode)
	})
}

// CopyLayerFile makes dst (new: never an existing file or a symlink) a
// private copy of src owned by uid (0: root's): a reflink where the file
// system has one, else a copy of src's data extents only (the overlay is
// sparse: its cost follows what the template wrote).
func CopyLayerFile(dst, src string, uid int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) != nil {
		if err := copySparse(out, in); err != nil {
			return fmt.Errorf("copy %s: %w", msg.Cite(src), err)
		}
	}
	if uid != 0 {
		if err := out.Chown(uid, uid); err != nil {
			return err
		}
	}
	return out.Close()
}

// copySparse copies in's data extents (SEEK_DATA/SEEK_HOLE) into out and
// gives out in's size.
func copySparse(out, in *os.File) error {
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		} else if err != nil {
			return err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return out.Truncate(size)
}

// maxBootLog bounds the template's boot log a console starts with.
const maxBootLog = 1 << 20

// copyLog makes dst (new, not a symlink, 0640) hold the last maxBootLog
// bytes of src: the VMM then appends to it.
func copyLog(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return err
	}
	defer out.Close()
	off := max(0, fi.Size()-maxBootLog)
	if _, err := io.Copy(out, io.NewSectionReader(in, off, fi.Size()-off)); err != nil {
		return err
	}
	return out.Close()
}

// waitAgent waits until the guest agent behind the hybrid vsock socket
// uds serves 9P (an attach answers), or agentWait or ctx ends.
func waitAgent(ctx context.Context, uds string) error {
	cl, _, err := dialAgentWait(ctx, uds, 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("agent not serving: %v", err)
	}
	return cl.Close()
}

// dialAgentWait is dialAgentCtl tried again every `every` until it
// succeeds, or agentWait or ctx ends (then its last error).
func dialAgentWait(ctx context.Context, uds string, every time.Duration) (*p9.Client, p9.File, error) {
	ctx, cancel := context.WithTimeout(ctx, agentWait)
	defer cancel()
	for {
		cl, ctl, err := dialAgentCtl(ctx, uds)
		if err == nil {
			return cl, ctl, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(every):
		}
	}
}

// dialAgentCtl attaches to the agent and walks to its /ctl. ctx's
// deadline also bounds the session (9P calls take no context): an agent
// that accepts and then stays silent cannot hold the caller past it.
func dialAgentCtl(ctx context.Context, uds string) (*p9.Client, p9.File, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := hybrid.Dial(dctx, uds, hybrid.AgentPort)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	cl, err := p9.NewClient(c, p9.WithMessageSize(agentMsize))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	// The root's fid is not clunked: the session is short and its end
	// frees it, without a round trip to a guest that has just resumed.
	root, err := cl.Attach("/")
	if err == nil {
		var f p9.File
		if _, f, err = root.Walk([]string{"ctl"}); err == nil {
			return cl, f, nil
		}
	}
	cl.Close()
	return nil, nil, err
}

// agentMsize is the message size of the daemon's sessions with a
// guest's agent (ctl messages only).
const agentMsize = 64 << 10

// giveUp ends m, a restored machine whose guest never took its refresh
// (err), and logs its last words first: the guest's console and the
// VMM's log, with the state dump refresh asked for (vCPU RIPs, interrupt
// state), which go with the run directory (test/e2b/run.sh reads them for
// the lab's faults).
func (m *vmmMachine) giveUp(log *slog.Logger, verb, id string, err error) {
	m.p.Kill()
	m.p.Wait()
	log.Warn(verb+": the restored guest never served; its machine is ended", append([]any{"id", id, "err", err}, m.LastWords()...)...)
}

// refresh is refreshGuest for m's guest, ending as soon as m does (and
// then saying why); via is refreshGuest's.
func (m *vmmMachine) refresh(ctx context.Context, hostname string) (via string, err error) {
	rctx, cancel := m.untilEnd(ctx)
	defer cancel()
	if via, err = refreshGuest(rctx, m.uds, hostname, time.Now); err != nil {
		// The machine is given up next: its VMM's state dump, if it
		// makes one, is the only record of where the guest stopped.
		m.p.AskDump()
		return via, m.whyEnded(err)
	}
	return via, nil
}

// refreshGuest gives a restored guest what its snapshot froze: the wall
// clock (agent verb time), its own hostname, and 64 bytes of fresh host
// entropy, as agent /ctl messages: in one exchange on the agent's
// hybrid.CtlPort, or, where the agent has no such port (a guest restored
// from a snapshot its older agent was running in), through 9P.
//
// via says which way it went: refreshLines or refresh9P.
func refreshGuest(ctx context.Context, uds, hostname string, now func() time.Time) (via string, err error) {
	seed := make([]byte, 64)
	if _, err := rand.Read(seed); err != nil {
		return "", err
	}
	msgs := func() []string {
		return []string{
			"entropy " + hex.EncodeToString(seed),
			"hostname " + hostname,
			"time " + strconv.FormatInt(now().UnixNano(), 10), // last: the closest to running
		}
	}
	err = agentCtlLines(ctx, uds, msgs)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return refreshLines, err
	}
	cl, ctl, err := dialAgentWait(ctx, uds, 20*time.Millisecond)
	if err != nil {
		return refresh9P, Errorf(syscall.ETIMEDOUT, "agent not serving: %v", err)
	}
	defer cl.Close()
	if _, _, err := ctl.Open(p9.WriteOnly); err != nil {
		return refresh9P, err
	}
	for _, m := range msgs() {
		if _, err := ctl.WriteAt([]byte(m), 0); err != nil {
			verb, _, _ := strings.Cut(m, " ")
			return refresh9P, Errorf(Errno(err), "agent %s: %v", verb, err)
		}
	}
	return refresh9P, nil
}

// The ways refreshGuest reaches the agent, as the restore's log line
// names them (via=).
const (
	refreshLines = "ctl-lines"
	refresh9P    = "9p"
)

// agentCtlLines sends the messages msgs makes (called once connected) to
// the agent's hybrid.CtlPort and reads its answer (package guest,
// ctllines.go). ECONNREFUSED: the agent has no such port. ctx bounds it,
// and agentWait at most: a guest that never answers cannot hold the
// caller.
func agentCtlLines(ctx context.Context, uds string, msgs func() []string) error {
	ctx, cancel := context.WithTimeout(ctx, agentWait)
	defer cancel()
	c, err := hybrid.Dial(ctx, uds, hybrid.CtlPort)
	if err != nil {
		return err
	}
	defer c.Close()
	dl, _ := ctx.Deadline() // agentWait's at the latest
	c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var b strings.Builder
	for _, m := range msgs() {
		b.WriteString(m + "\n")
	}
	b.WriteString("\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		return Errorf(syscall.EIO, "agent ctl: %v", err)
	}
	reply, err := bufio.NewReaderSize(io.LimitReader(c, 4096), 4096).ReadString('\n')
	if err != nil {
		return Errorf(syscall.EIO, "agent ctl: no answer: %v", err)
	}
	reply = strings.TrimSuffix(reply, "\n")
	if reply == "ok" {
		return nil
	}
	var errno int
	var text string
	if f := strings.SplitN(reply, " ", 3); len(f) == 3 && f[0] == "error" {
		if n, err := strconv.Atoi(f[1]); err == nil && n > 0 && n < 4096 {
			errno, text = n, f[2]
		}
	}
	if errno == 0 {
		return Errorf(syscall.EIO, "agent ctl: bad answer %s", msg.Cite(reply))
	}
	if syscall.Errno(errno) == syscall.ECONNREFUSED {
		errno = int(syscall.EIO) // not "no such port"
	}
	return GuestError(syscall.Errno(errno), "agent", text)
}
