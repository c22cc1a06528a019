package ctlfs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/fs/ctlfs"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl"
	"sandfs/ctl/cred"
	sfs "sandfs/fs"
	"sandfs/fs/fusefs"
	"sandfs/fs/ninep"
	"sandfs/test/testenv"
)

// The attack of issue 10 item 1: local users other than a sandbox's
// owner drive it through the daemon's FUSE mount (allow_other) or its
// unix socket. The users, none of them root: the victim owns the
// sandbox; the outsider is in no group; the member is in the creators'
// group, so it may create sandboxes of its own.
var (
	victim   = cred.Cred{UID: 4100, GID: 4100}
	outsider = cred.Cred{UID: 4101, GID: 4101}
	member   = cred.Cred{UID: 4102, GID: 4102, Groups: func() []uint32 { return []uint32{creators} }}
)

// creators is the group that may create sandboxes (sandfs serve --group).
const creators = 4242

// attacks is what each attacker tries, through both transports, and what
// must come of it: "ok" or the errno. Paths are relative to the root;
// TRANSPORT stands for the transport's name, and victim-TRANSPORT is the
// victim's running sandbox, whose fs/ holds "secret".
var attacks = []struct {
	who, name, op, path, arg string
	want                     string
}{
	// Nobody may touch the victim's sandbox beyond reading its state.
	// Reads first, then writes, the kill last: without the checks each
	// attack would succeed in turn.
	{"outsider", "status", "read", "sandboxes/victim-TRANSPORT/status", "", "ok"},
	{"outsider", "state", "read", "sandboxes/victim-TRANSPORT/ctl", "", "ok"},
	{"outsider", "list", "list", "sandboxes", "", "ok"},
	{"outsider", "read-fs", "read", "sandboxes/victim-TRANSPORT/fs/secret", "", "EACCES"},
	{"outsider", "list-fs", "list", "sandboxes/victim-TRANSPORT/fs", "", "EACCES"},
	{"outsider", "list-procs", "list", "sandboxes/victim-TRANSPORT/procs", "", "EACCES"},
	{"outsider", "console", "read", "sandboxes/victim-TRANSPORT/console", "", "EACCES"},
	{"outsider", "err", "read", "sandboxes/victim-TRANSPORT/err", "", "EACCES"},
	{"outsider", "global-err", "read", "err", "", "EACCES"},
	{"outsider", "create-fs", "create", "sandboxes/victim-TRANSPORT/fs/planted", "", "EACCES"},
	{"outsider", "exec", "write", "sandboxes/victim-TRANSPORT/exec", "echo pwned", "EACCES"},
	{"outsider", "new", "write", "ctl", "new evil", "EACCES"},
	{"outsider", "clone", "open", "clone", "", "EACCES"},
	// The victim's snapshot vsnap-TRANSPORT: its name is listed, nothing
	// more.
	{"outsider", "list-snapshots", "list", "snapshots", "", "ok"},
	{"outsider", "snap-info", "read", "snapshots/vsnap-TRANSPORT/info", "", "EACCES"},
	{"outsider", "snap-list", "list", "snapshots/vsnap-TRANSPORT", "", "EACCES"},
	{"outsider", "sandbox-snaps", "list", "sandboxes/victim-TRANSPORT/snapshots", "", "EACCES"},
	{"outsider", "snap-info-via-sandbox", "read", "sandboxes/victim-TRANSPORT/snapshots/vsnap-TRANSPORT/info", "", "EACCES"},
	{"outsider", "snap-rm", "write", "snapshots/vsnap-TRANSPORT/ctl", "rm", "EACCES"},
	{"outsider", "snapshot", "write", "sandboxes/victim-TRANSPORT/ctl", "snapshot mine", "EACCES"},
	{"outsider", "rollback", "write", "sandboxes/victim-TRANSPORT/ctl", "rollback vsnap-TRANSPORT", "EACCES"},
	{"outsider", "kill", "write", "sandboxes/victim-TRANSPORT/ctl", "kill", "EACCES"},
	// A member of the creators' group creates its own sandbox and uses
	// it, and still cannot touch the victim's.
	{"member", "new", "write", "ctl", "new mine-TRANSPORT", "ok"},
	{"member", "own-fs", "list", "sandboxes/mine-TRANSPORT/fs", "", "ok"},
	{"member", "read-fs", "read", "sandboxes/victim-TRANSPORT/fs/secret", "", "EACCES"},
	{"member", "exec", "write", "sandboxes/victim-TRANSPORT/exec", "echo pwned", "EACCES"},
	{"member", "kill", "write", "sandboxes/victim-TRANSPORT/ctl", "kill", "EACCES"},
	{"member", "kill-by-id", "write", "ctl", "kill victim-TRANSPORT", "EPERM"},
	{"member", "rm-by-id", "write", "ctl", "rm victim-TRANSPORT", "EPERM"},
	{"member", "new-from-victims", "write", "ctl", "new stolen-TRANSPORT from=vsnap-TRANSPORT", "EPERM"},
	{"member", "clone", "write", "sandboxes/victim-TRANSPORT/ctl", "clone 2", "EACCES"},
	{"member", "snap-rm", "write", "snapshots/vsnap-TRANSPORT/ctl", "rm", "EACCES"},
	// The victim's world vworld-TRANSPORT over BASE/vlower: its name is
	// listed, nothing more; nobody makes a world over a directory they
	// may not read (BASE/rootonly is root's, 0700).
	{"outsider", "list-worlds", "list", "worlds", "", "ok"},
	{"outsider", "world-lower", "read", "worlds/vworld-TRANSPORT/lower", "", "EACCES"},
	{"outsider", "world-fs", "read", "worlds/vworld-TRANSPORT/fs/secret", "", "EACCES"},
	{"outsider", "world-upper", "list", "worlds/vworld-TRANSPORT/upper", "", "EACCES"},
	{"outsider", "world-plant", "create", "worlds/vworld-TRANSPORT/fs/planted", "", "EACCES"},
	{"outsider", "world-apply", "write", "worlds/vworld-TRANSPORT/ctl", "apply force", "EACCES"},
	{"outsider", "world-new", "write", "ctl", "world evil lower=BASE/vlower", "EACCES"},
	{"member", "world-rootonly", "write", "ctl", "world evil-TRANSPORT lower=BASE/rootonly", "EACCES"},
	{"member", "world-own", "write", "ctl", "world mw-TRANSPORT lower=BASE/vlower", "ok"},
	{"member", "world-own-fs", "read", "worlds/mw-TRANSPORT/fs/secret", "", "ok"},
	{"member", "world-fs", "read", "worlds/vworld-TRANSPORT/fs/secret", "", "EACCES"},
	{"member", "world-attach", "write", "ctl", "new stolenw-TRANSPORT world=vworld-TRANSPORT", "EPERM"},
	{"member", "world-rm", "write", "worlds/vworld-TRANSPORT/ctl", "rm", "EACCES"},
}

// TestAttackOtherUser: an unprivileged uid writes ctl files and reads
// another user's fs/, through a real FUSE mount (allow_other, as sandfs
// serve mounts it) and a real unix socket (mode 0666 here, so that the
// daemon's own check is what refuses), each attacker a process of its
// own with its own uid and groups. Every refusal holds, what the modes
// allow works, and nothing changed: the victim's sandbox runs, its
// secret is intact, nothing was planted, no sandbox was made but the
// member's own. Each transport has a victim of its own, so that each
// shows every attack (without the checks, the first kill would hide
// what follows).
func TestAttackOtherUser(t *testing.T) {
	testenv.NeedFUSE(t)
	base, err := os.MkdirTemp("", "sandfs-access-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// The attackers run this test binary; the one go test built is in a
	// directory only root may enter.
	bin := filepath.Join(base, "attacker")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}

	rt := &agentRuntime{t: t, agents: map[string]*testAgent{}}
	p, err := ctl.Open(t.TempDir(), rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetWorldOpener(ctlfs.OpenWorld)
	for d, mode := range map[string]os.FileMode{"vlower": 0o755, "rootonly": 0o700} {
		if err := os.Mkdir(filepath.Join(base, d), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(base, d), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "vlower", "secret"), []byte("lower secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := ctlfs.New(p, nil)
	tree.SetGroup(creators)

	sock := filepath.Join(base, "sandfs.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); ninep.NewServer(tree.Root(), nil).Serve(ctx, l, "") }()
	t.Cleanup(func() { cancel(); <-served })

	mnt := filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := fusefs.New(mnt, tree.Root(), fusefs.Options{AllowOther: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	for _, transport := range []string{"fuse", "9p"} {
		t.Run(transport, func(t *testing.T) {
			attackOtherUser(t, p, rt, tree, bin, base, transport)
		})
	}
	var names []string
	for _, sb := range p.Sandboxes() {
		names = append(names, sb.ID())
	}
	if want := []string{"mine-9p", "mine-fuse", "victim-9p", "victim-fuse"}; !sameNames(names, want) {
		t.Errorf("sandboxes = %v; want %v (none made by the outsider)", names, want)
	}
	// What the modes say, stat shows.
	fi, err := os.Stat(filepath.Join(mnt, "sandboxes/victim-fuse/fs"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != victim.UID || st.Gid != victim.GID || fi.Mode().Perm() != 0o700 {
		t.Errorf("stat sandboxes/victim-fuse/fs: %v %d:%d; want drwx------ %d:%d", fi.Mode(), st.Uid, st.Gid, victim.UID, victim.GID)
	}
}

// attackOtherUser makes the victim's sandbox victim-<transport>, with a
// secret in its fs/, runs both attackers through transport and checks
// their results and that nothing was disturbed.
func attackOtherUser(t *testing.T, p *ctl.Plane, rt *agentRuntime, tree *ctlfs.Tree, bin, base, transport string) {
	id := "victim-" + transport
	if _, err := p.Ctl(cred.With(context.Background(), victim), []byte("new "+id)); err != nil {
		t.Fatal(err)
	}
	if err := vsbCtl(p, id, "snapshot vsnap-"+transport); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ctl(cred.With(context.Background(), victim), []byte("world vworld-"+transport+" lower="+filepath.Join(base, "vlower"))); err != nil {
		t.Fatal(err)
	}
	agentRoot := rt.agent(id).root
	const secret = "the victim's secret\n"
	if err := os.WriteFile(filepath.Join(agentRoot, "secret"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	vsb, err := p.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	version := vsb.Version()

	for _, who := range []string{"outsider", "member"} {
		got := runAttacker(t, bin, base, transport, who, map[string]cred.Cred{"outsider": outsider, "member": member}[who])
		for _, a := range attacks {
			if a.who != who {
				continue
			}
			path, arg := strings.ReplaceAll(a.path, "TRANSPORT", transport), strings.ReplaceAll(strings.ReplaceAll(a.arg, "TRANSPORT", transport), "BASE", base)
			if r, ok := got[a.name]; !ok {
				t.Errorf("%s %s: no result", who, a.name)
			} else if r != a.want {
				t.Errorf("%s %s (%s %s %q) = %s; want %s", who, a.name, a.op, path, arg, r, a.want)
			}
		}
	}

	// Nothing else disturbed.
	if st := vsb.State(); st != ctl.StateRunning || vsb.Version() != version {
		t.Errorf("victim: state %s, version %d; want running, %d (unchanged)", st, vsb.Version(), version)
	}
	if b, err := os.ReadFile(filepath.Join(agentRoot, "secret")); err != nil || string(b) != secret {
		t.Errorf("victim's secret = %q, %v; want it intact", b, err)
	}
	if _, err := os.Lstat(filepath.Join(agentRoot, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("planted file in the victim's fs/: %v", err)
	}
	if si, err := p.LookupSnapshot("vsnap-" + transport); err != nil || len(p.Snapshots()) != map[string]int{"fuse": 1, "9p": 2}[transport] {
		t.Errorf("victim's snapshot: %+v, %v; snapshots %v; want it, and no other", si, err, p.Snapshots())
	}
	if wi, err := p.LookupWorld("vworld-" + transport); err != nil || wi.Owner != victim.Owner() {
		t.Errorf("victim's world: %+v, %v", wi, err)
	} else if wb, err := p.World(wi.Name); err != nil {
		t.Error(err)
	} else if d, err := wb.Diff(); err != nil || d != "" {
		t.Errorf("victim's world changed: %q, %v", d, err)
	}
	if wi, err := p.LookupWorld("mw-" + transport); err != nil || wi.Owner != member.Owner() {
		t.Errorf("the member's world: %+v, %v", wi, err)
	}
	if _, err := p.LookupWorld("evil-" + transport); err == nil {
		t.Error("a world over root's 0700 directory was made")
	}
	if mine, err := p.Lookup("mine-" + transport); err != nil || mine.Owner() != member.Owner() {
		t.Errorf("the member's sandbox: %v; want it, owned by %+v", err, member.Owner())
	}
	// The victim still reads its own files, as itself.
	vctx := cred.With(context.Background(), victim)
	c, err := sfs.NewChan(vctx, tree.Root(), cred.Owner{})
	for _, name := range []string{"sandboxes", id, "fs", "secret"} {
		if err == nil {
			c, err = c.Walk(vctx, name)
		}
	}
	var h sfs.Handle
	if err == nil {
		h, err = c.Open(vctx, sfs.ReadOnly)
	}
	if err != nil {
		t.Fatalf("victim: open its fs/secret: %v", err)
	}
	defer h.Close()
	b := make([]byte, 100)
	if n, err := h.Read(vctx, b, 0); err != nil || string(b[:n]) != secret {
		t.Errorf("victim: read its fs/secret = %q, %v", b[:n], err)
	}
}

// vsbCtl writes m to sandbox id's ctl as the victim.
func vsbCtl(p *ctl.Plane, id, m string) error {
	sb, err := p.Lookup(id)
	if err != nil {
		return err
	}
	return sb.Ctl(cred.With(context.Background(), victim), []byte(m))
}

// runAttacker runs the attacks of who as a process with cred's uid and
// groups, through transport, and returns each attack's result.
func runAttacker(t *testing.T, bin, base, transport, who string, cred cred.Cred) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestHelperAttacker$")
	cmd.Dir = base // never inside the mount: see sh
	cmd.Env = []string{"SANDFS_TEST_ATTACKER=" + who, "SANDFS_TEST_BASE=" + base, "SANDFS_TEST_TRANSPORT=" + transport}
	var groups []uint32
	if cred.Groups != nil {
		groups = cred.Groups()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: cred.UID, Gid: cred.GID, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("attacker %s over %s: %v\n%s", who, transport, err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "attack "); ok {
			name, r, _ := strings.Cut(rest, ": ")
			got[name] = r
		}
	}
	return got
}

// TestHelperAttacker is an attacker process of TestAttackOtherUser; it
// does nothing in an ordinary test run. It prints one line per attack,
// "attack <name>: ok" or "attack <name>: <errno>".
func TestHelperAttacker(t *testing.T) {
	who := os.Getenv("SANDFS_TEST_ATTACKER")
	if who == "" {
		return
	}
	base, transport := os.Getenv("SANDFS_TEST_BASE"), os.Getenv("SANDFS_TEST_TRANSPORT")
	var tg attackTarget = fuseAttack{osTarget{filepath.Join(base, "mnt")}}
	if transport == "9p" {
		c, err := net.Dial("unix", filepath.Join(base, "sandfs.sock"))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := p9.NewClient(c)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		root, err := cl.Attach("")
		if err != nil {
			t.Fatal(err)
		}
		tg = p9Attack{p9Target{root}}
	}
	for _, a := range attacks {
		if a.who != who {
			continue
		}
		p, arg := strings.ReplaceAll(a.path, "TRANSPORT", transport), strings.ReplaceAll(strings.ReplaceAll(a.arg, "TRANSPORT", transport), "BASE", base)
		var err error
		switch a.op {
		case "read":
			_, err = readFile(tg, p)
		case "write":
			err = writeFile(tg, p, arg)
		case "open":
			var f tfile
			if f, err = tg.open(p, os.O_RDONLY); err == nil {
				f.Close()
			}
		case "list":
			_, err = tg.readDir(p)
		case "create":
			err = tg.create(p)
		}
		r := "ok"
		if err != nil {
			r = unix.ErrnoName(errnoOf(err))
		}
		fmt.Printf("attack %s: %s\n", a.name, r)
	}
}

// attackTarget is a target that can also create a file.
type attackTarget interface {
	target
	create(path string) error
}

type fuseAttack struct{ osTarget }

func (f fuseAttack) create(p string) error {
	fl, err := os.OpenFile(filepath.Join(f.dir, p), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err == nil {
		fl.Close()
	}
	return err
}

type p9Attack struct{ p9Target }

func (t p9Attack) create(p string) error {
	d, err := t.walk(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer d.Close()
	f, _, _, err := d.Create(filepath.Base(p), p9.WriteOnly, 0o644, p9.NoUID, p9.NoGID)
	if err == nil {
		f.Close()
	}
	return err
}

func copyFile(from, to string, perm os.FileMode) error {
	r, err := os.Open(from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
