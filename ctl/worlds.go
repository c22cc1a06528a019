package ctl

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// WorldBackend is a world's data: the union of its lower and its upper
// and its change set (package world, which ctl does not import: it
// presents nodes of the tree). Its methods are safe for concurrent use.
type WorldBackend interface {
	// Diff is the change set, one change a line, sorted.
	Diff() (string, error)
	// Apply writes the changes into the lower with as's file system
	// credentials (the kernel refuses what as could not write); unless
	// force, it refuses (EBUSY, naming the paths) if any changed there
	// since.
	Apply(force bool, as cred.Cred) error
	Discard() error
	// Rebase drops the changes the lower now has too; it returns how many.
	Rebase() (int, error)
	// Status is the end of the world's status line: more key=value fields.
	Status() string
	// Save writes a copy of the changes into dir (which must not exist)
	// as they are at one instant, and says how it copied (for the log).
	Save(dir string) (string, error)
	// Restore replaces the changes by those Save wrote into dir.
	Restore(dir string) error
	// ServeConn serves the world's union on c (9P2000.L) to a client
	// taken for who, until c or ctx ends: a guest's /workspace. What it
	// refuses the client for a bound goes to log.
	ServeConn(ctx context.Context, c net.Conn, who cred.Cred, log *slog.Logger)
	Close() error
}

// WorldOpener opens the data of a world over the host directory lower,
// kept in dir, in mode (one of WorldModes), belonging to owner (an
// unsafe-rw world writes into the lower as the owner). The daemon sets
// it (Plane.SetWorldOpener); without one, worlds are listed but their
// data cannot be reached (ENODEV).
type WorldOpener func(lower, dir, mode string, owner cred.Owner) (WorldBackend, error)

// worldReg is the plane's registry of worlds.
type worldReg struct {
	mu     sync.Mutex // a leaf; protects the following fields
	open   WorldOpener
	worlds map[string]*worldEntry
	bad    map[string]bool   // names of corrupt records: never reused
	lost   map[*Sandbox]bool // re-attached sandboxes whose /workspace is to mount again (worldLost)
	stale  map[*Sandbox]bool // paused sandboxes whose guest is to forget its cached world at resume (worldChanged)
}

// worldEntry is one world: its record and, once used, its data.
type worldEntry struct {
	info WorldInfo
	b    WorldBackend // nil until first used; guarded by worldReg.mu
}

// loadWorlds fills the registry from the store.
func (p *Plane) loadWorlds() error {
	infos, bad, err := p.st.loadWorlds(p.log)
	if err != nil {
		return err
	}
	p.wr.worlds, p.wr.bad = map[string]*worldEntry{}, map[string]bool{}
	for _, wi := range infos {
		p.wr.worlds[wi.Name] = &worldEntry{info: wi}
	}
	for _, n := range bad {
		p.wr.bad[n] = true
	}
	return nil
}

// closeWorlds closes the worlds' data.
func (p *Plane) closeWorlds() {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	for _, e := range p.wr.worlds {
		if e.b != nil {
			e.b.Close()
			e.b = nil
		}
	}
}

// SetWorldOpener sets how the worlds' data is opened. Call it before
// serving the tree. The running sandboxes re-attached at Open then get
// their /workspace mounted again.
func (p *Plane) SetWorldOpener(o WorldOpener) {
	p.wr.mu.Lock()
	p.wr.open = o
	p.wr.mu.Unlock()
	p.reattachLost()
}

// Worlds returns every world, sorted by name.
func (p *Plane) Worlds() []WorldInfo {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	out := make([]WorldInfo, 0, len(p.wr.worlds))
	for _, e := range p.wr.worlds {
		out = append(out, e.info)
	}
	slices.SortFunc(out, func(a, b WorldInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LookupWorld returns world name's record.
func (p *Plane) LookupWorld(name string) (WorldInfo, error) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	e, ok := p.wr.worlds[name]
	if !ok {
		return WorldInfo{}, errNoWorld("lookup", name)
	}
	return e.info, nil
}

// World returns world name's data, opening it at first use.
func (p *Plane) World(name string) (WorldBackend, error) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	e, ok := p.wr.worlds[name]
	if !ok {
		return nil, errNoWorld("world", name)
	}
	return p.backendLocked(e)
}

func (p *Plane) backendLocked(e *worldEntry) (WorldBackend, error) {
	if e.b != nil {
		return e.b, nil
	}
	if p.wr.open == nil {
		return nil, Errorf(syscall.ENODEV, "world: the daemon serves no world data")
	}
	b, err := p.wr.open(e.info.Lower, p.st.worldDir(e.info.Name), e.info.Mode, e.info.Owner)
	if err != nil {
		return nil, Errorf(syscall.EIO, "world %s: %v", msg.Cite(e.info.Name), err)
	}
	e.b = b
	return b, nil
}

// mayUseWorld checks that a sandbox of owner o may attach world name
// ("" for none): it exists and is o's (or o is root).
func (p *Plane) mayUseWorld(verb, name string, o cred.Owner) error {
	if name == "" {
		return nil
	}
	wi, err := p.LookupWorld(name)
	if err != nil {
		return errNoWorld(verb, name)
	}
	if o.UID != 0 && o.UID != wi.Owner.UID {
		return Errorf(syscall.EPERM, "%s: world %s belongs to uid %d", verb, msg.Cite(name), wi.Owner.UID)
	}
	return nil
}

// ctlWorld creates a world (world on /ctl). The writer must be able to
// read the lower (mayRead), and the world is theirs.
func (p *Plane) ctlWorld(ctx context.Context, c Command, v *Verb) (string, error) {
	who := cred.Of(ctx)
	lower, err := checkLower(v.Name, c.Keys["lower"], who)
	if err != nil {
		return "", err
	}
	mode := c.Keys["mode"]
	if mode == "" {
		mode = WorldModes[0]
	}
	wi := WorldInfo{Name: c.World, Owner: who.Owner(), Lower: lower, Mode: mode, Created: time.Now().UTC()}
	if _, err := p.addWorld(v.Name, wi); err != nil {
		return "", err
	}
	return wi.Name + "\n", nil
}

// addWorld records world wi and opens its data, which it returns (nil
// if the plane has no WorldOpener).
func (p *Plane) addWorld(verb string, wi WorldInfo) (WorldBackend, error) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if _, ok := p.wr.worlds[wi.Name]; ok || p.wr.bad[wi.Name] {
		return nil, Errorf(syscall.EEXIST, "%s: world %s exists", verb, msg.Cite(wi.Name))
	}
	if err := p.st.worldCreate(wi); err != nil {
		return nil, Errorf(syscall.EIO, "%s: %v", verb, err)
	}
	e := &worldEntry{info: wi}
	var b WorldBackend
	if p.wr.open != nil {
		var err error
		if b, err = p.backendLocked(e); err != nil {
			p.st.worldRemove(wi.Name)
			return nil, err
		}
	}
	p.wr.worlds[wi.Name] = e
	return b, nil
}

// checkLower resolves the lower path (absolute, its symbolic links
// resolved) and checks that who may read it.
func checkLower(verb, lower string, who cred.Cred) (string, error) {
	if lower == "" || !filepath.IsAbs(lower) {
		return "", Errorf(syscall.EINVAL, "%s: lower= must be an absolute host path %s", verb, msg.Cite(lower))
	}
	real, err := evalSymlinksAs(who, lower)
	if err != nil {
		return "", Errorf(Errno(err), "%s: lower %s: %v", verb, msg.Cite(lower), pathErrText(err))
	}
	if err := mayRead(who, real); err != nil {
		return "", Errorf(syscall.EACCES, "%s: %s may not read lower %s (%s)", verb, who, msg.Cite(lower), err)
	}
	if err := notKernelFS(real); err != nil && !who.Privileged() {
		return "", Errorf(syscall.EACCES, "%s: lower %s: %v", verb, msg.Cite(lower), err)
	}
	return real, nil
}

// kernelFS are the file systems whose files the kernel guards at open by
// the opener's credentials beyond their modes (/proc/<pid>/maps,
// /proc/kallsyms, sysfs attributes): the daemon opens a lower's files as
// root, so only root may have a world over one.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs", unix.DEBUGFS_MAGIC: "debugfs",
	unix.TRACEFS_MAGIC: "tracefs", unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpf",
	unix.CGROUP_SUPER_MAGIC: "cgroup", unix.CGROUP2_SUPER_MAGIC: "cgroup2", 0x62656570: "configfs",
	unix.EFIVARFS_MAGIC: "efivarfs", unix.PSTOREFS_MAGIC: "pstore", unix.DEVPTS_SUPER_MAGIC: "devpts",
}

// notKernelFS refuses a directory on one of kernelFS.
func notKernelFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if name, ok := kernelFS[int64(st.Type)]; ok {
		return fmt.Errorf("on %s, whose files the kernel guards by the opener (root only)", name)
	}
	return nil
}

// evalSymlinksAs is filepath.EvalSymlinks of the absolute path as who
// would resolve it: each directory is searched only if who may search it
// (EACCES otherwise, as the kernel would say), so the daemon's own
// resolution tells nobody what is inside a directory they may not search
// (whether a name exists there, where a link there points).
func evalSymlinksAs(who cred.Cred, path string) (string, error) {
	const maxLinks = 40
	todo := strings.Split(strings.Trim(path, "/"), "/")
	cur, links := "/", 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(cur, &st); err != nil {
			return "", &os.PathError{Op: "lstat", Path: cur, Err: err}
		}
		if !who.Permits(cred.Owner{UID: st.Uid, GID: st.Gid}, st.Mode, 1) {
			return "", &os.PathError{Op: "lstat", Path: cur, Err: syscall.EACCES}
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", &os.PathError{Op: "lstat", Path: path, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(strings.Trim(target, "/"), "/"), todo...)
	}
	return cur, nil
}

// pathErrText is an *os.PathError's reason alone.
func pathErrText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// denied is why mayRead refuses.
type denied string

func (d denied) Error() string { return string(d) }

// mayRead checks that who may reach and list the directory path (no
// symbolic links in it): search on every directory above it, read and
// search on it. POSIX ACLs are not consulted (a refusal may be stricter
// than the kernel's).
func mayRead(who cred.Cred, path string) error {
	var st syscall.Stat_t
	dir := "/"
	for _, name := range append([]string{""}, strings.Split(strings.Trim(path, "/"), "/")...) {
		dir = filepath.Join(dir, name)
		if err := syscall.Lstat(dir, &st); err != nil {
			return denied(dir + ": " + err.Error())
		}
		want := uint32(1)
		if dir == path {
			if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				return denied(dir + " is not a directory")
			}
			want = 5
		}
		if !who.Permits(cred.Owner{UID: st.Uid, GID: st.Gid}, st.Mode, want) {
			return denied("no access to " + dir)
		}
	}
	return nil
}

// WorldCtl applies one message of WorldVerbs to world name
// (/worlds/<w>/ctl); a read of the same open gives the reply. A
// failure's text becomes the plane's Err (/err) and is logged.
func (p *Plane) WorldCtl(ctx context.Context, name string, m []byte) (string, error) {
	reply, err := p.worldCtl(ctx, name, m)
	if err != nil {
		p.fail("", m, err)
	}
	return reply, err
}

func (p *Plane) worldCtl(ctx context.Context, name string, m []byte) (string, error) {
	c, v, err := parse(m, WorldVerbs)
	if err != nil {
		return "", err
	}
	if p.isClosed() {
		return "", errClosed
	}
	wi, err := p.LookupWorld(name)
	if err != nil {
		return "", err
	}
	if who := cred.Of(ctx); !who.Privileged() && who.UID != wi.Owner.UID {
		return "", Errorf(syscall.EPERM, "%s: world %s belongs to uid %d", v.Name, msg.Cite(name), wi.Owner.UID)
	}
	c.World = name
	return v.Run.world(p, ctx, c, v)
}

// worldDo runs f on the named world's data, naming errors by the verb.
func (p *Plane) worldDo(c Command, v *Verb, f func(WorldBackend) (string, error)) (string, error) {
	b, err := p.World(c.World)
	if err != nil {
		return "", err
	}
	reply, err := f(b)
	if err != nil {
		return "", msg.Prefix(v.Name, err)
	}
	return reply, nil
}

// worldApply writes into the lower as the world's owner, who was only
// checked to read it: the kernel refuses every write the owner could not
// make. The owner's own apply uses their groups too; root's apply of
// another's world uses the owner's uid and gid alone.
func (p *Plane) worldApply(ctx context.Context, c Command, v *Verb) (string, error) {
	wi, err := p.LookupWorld(c.World)
	if err != nil {
		return "", err
	}
	as := cred.Cred{UID: wi.Owner.UID, GID: wi.Owner.GID}
	if who := cred.Of(ctx); who.UID == wi.Owner.UID {
		as = who
	}
	// A failed apply may have written some files: the guests forget either way.
	defer p.worldChanged(ctx, c.World, true)
	return p.worldDo(c, v, func(b WorldBackend) (string, error) { return "", b.Apply(len(c.Args) == 1, as) })
}

func (p *Plane) worldDiscard(ctx context.Context, c Command, v *Verb) (string, error) {
	defer p.worldChanged(ctx, c.World, false)
	return p.worldDo(c, v, func(b WorldBackend) (string, error) { return "", b.Discard() })
}

func (p *Plane) worldRebase(ctx context.Context, c Command, v *Verb) (string, error) {
	defer p.worldChanged(ctx, c.World, false)
	return p.worldDo(c, v, func(b WorldBackend) (string, error) {
		n, err := b.Rebase()
		return strconv.Itoa(n) + "\n", err
	})
}

// worldRm removes the world: its data is closed, its directory (upper
// included) deleted.
func (p *Plane) worldRm(_ context.Context, c Command, v *Verb) (string, error) {
	for _, s := range p.Sandboxes() {
		if s.Config().World == c.World && s.State() != StateDead {
			return "", Errorf(syscall.EBUSY, "%s: world %s is attached to sandbox %s (kill it first)", v.Name, msg.Cite(c.World), msg.Cite(s.ID()))
		}
	}
	return "", p.removeWorld(v.Name, c.World)
}

// removeWorld closes world name's data and deletes its directory.
func (p *Plane) removeWorld(verb, name string) error {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	e, ok := p.wr.worlds[name]
	if !ok {
		return errNoWorld(verb, name)
	}
	if e.b != nil {
		e.b.Close()
		e.b = nil
	}
	delete(p.wr.worlds, name)
	if err := p.st.worldRemove(name); err != nil {
		return Errorf(syscall.EIO, "%s: %v", verb, err)
	}
	return nil
}
