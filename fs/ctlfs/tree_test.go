package ctlfs_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl"
)

// The behaviour table: every named check runs against every target
// (in-process, FUSE, 9P, and the FUSE-over-9P bridge on unix and TCP).
// Each target gets its own control plane with a fake runtime.

var makeTargets = map[string]func(t *testing.T, e *env) target{
	"inproc": func(t *testing.T, e *env) target { return inproc{e.tree.Root()} },
	"fuse":   func(t *testing.T, e *env) target { return mountFUSE(t, e.tree.Root()) },
	"9p": func(t *testing.T, e *env) target {
		root, err := dial9P(t, serve9P(t, e.tree.Root(), "unix", ""), "")
		if err != nil {
			t.Fatal(err)
		}
		return p9Target{root}
	},
	"bridge-unix": func(t *testing.T, e *env) target {
		return mountBridge(t, serve9P(t, e.tree.Root(), "unix", ""), "")
	},
	"bridge-tcp": func(t *testing.T, e *env) target {
		return mountBridge(t, serve9P(t, e.tree.Root(), "tcp", "tok3n"), "tok3n")
	},
}

// badInput is a malformed message and the table it is sent to.
type badInput struct {
	name string
	msg  string
}

var globalBad = []badInput{
	{"empty", "\n"},
	{"unknown verb", "bogus\n"},
	{"prefix of a verb", "ne box\n"},
	{"missing argument", "kill\n"},
	{"too many arguments", "rm a b\n"},
	{"unknown key", "new box frob=1\n"},
	{"oversize", strings.Repeat("x", ctl.MaxMessage+1)},
	{"binary junk", "\x00\xff\xfe\x01garbage"},
	{"two lines", "kill a\nkill b\n"},
}

var sandboxBad = []badInput{
	{"empty", "\n"},
	{"unknown verb", "frob\n"},
	{"too many arguments", "pause now\n"},
	{"oversize", strings.Repeat("y", ctl.MaxMessage+10)},
	{"binary junk", "\x00\x01\x02"},
	{"two lines", "pause\nresume\n"},
}

// writeBad writes each of bad to ctlPath and checks the errno and the
// text errPath then holds against what table tb says (want).
func writeBad(t *testing.T, tg target, bad []badInput, tb ctl.Table, ctlPath, errPath string) {
	t.Helper()
	for _, in := range bad {
		errno, text := want(t, in.msg, tb)
		err := writeFile(tg, ctlPath, in.msg)
		if got := errnoOf(err); got != errno {
			t.Errorf("%s: write %s %q = %v (%d); want %v", in.name, ctlPath, in.msg, err, got, errno)
		}
		if got, err := readFile(tg, errPath); err != nil || got != text+"\n" {
			t.Errorf("%s: read %s = %q, %v; want %q", in.name, errPath, got, err, text+"\n")
		}
	}
}

// want returns the errno and text ctl gives for msg on table tb.
func want(t *testing.T, msg string, tb ctl.Table) (syscall.Errno, string) {
	t.Helper()
	_, err := ctl.Parse([]byte(msg), tb)
	if err == nil {
		t.Fatalf("test input %q parses; want an error", msg)
	}
	return ctl.Errno(err), err.Error()
}

// writeRead writes msg to path and returns what a read of the same open
// gives then.
func writeRead(t *testing.T, tg target, path, msg string) string {
	t.Helper()
	f, err := tg.open(path, os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(msg)); err != nil {
		t.Fatalf("write %s %q: %v", path, msg, err)
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil {
		t.Fatalf("read %s after %q: %v", path, msg, err)
	}
	return string(b[:n])
}

// newSandbox creates a running sandbox called name through tg's /ctl,
// checking that a read of the same open gives its id.
func newSandbox(t *testing.T, tg target, name string) {
	t.Helper()
	f, err := tg.open("ctl", os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("new " + name + "\n")); err != nil {
		t.Fatalf("write new %s: %v", name, err)
	}
	b := make([]byte, 100)
	n, err := f.Read(b)
	if err != nil || string(b[:n]) != name+"\n" {
		t.Fatalf("read ctl after new = %q, %v; want %q", b[:n], err, name+"\n")
	}
}

var checks = map[string]func(t *testing.T, tg target){
	"root lists the tree": func(t *testing.T, tg target) {
		got, err := tg.readDir("/")
		want := []string{"ctl", "clone", "err", "sandboxes", "templates", "snapshots", "worlds"}
		if err != nil || !sameNames(got, want) {
			t.Errorf("readdir / = %v, %v; want %v", got, err, want)
		}
		if got, err := tg.readDir("worlds"); err != nil || len(got) != 0 {
			t.Errorf("readdir worlds = %v, %v; want empty", got, err)
		}
	},
	"templates show the runtime's": func(t *testing.T, tg target) {
		if got, err := tg.readDir("templates"); err != nil || !sameNames(got, []string{"base"}) {
			t.Errorf("readdir templates = %v, %v; want [base]", got, err)
		}
		if got, err := tg.readDir("templates/base"); err != nil || !sameNames(got, []string{"info", "shapes", "log", "policy"}) {
			t.Errorf("readdir templates/base = %v, %v; want info, shapes, log, policy", got, err)
		}
		for f, want := range map[string]string{
			"templates/base/info":   "base image=268435456 shapes=1\n",
			"templates/base/shapes": "base-256m1c-0123456789abcdef mem=256M cpus=1 data=47185920 disk=581632 built=1764423000 current=yes\n",
			"templates/base/log":    "",
			"templates/base/policy": "default deny\n", // the runtime lists no policies
		} {
			if got, err := readFile(tg, f); err != nil || got != want {
				t.Errorf("read %s = %q, %v; want %q", f, got, err, want)
			}
		}
		if _, err := tg.readDir("templates/nosuch"); err == nil {
			t.Errorf("readdir templates/nosuch = nil error; want ENOENT")
		}
	},
	"ctl read gives usage": func(t *testing.T, tg target) {
		got, err := readFile(tg, "ctl")
		if err != nil || !strings.HasPrefix(got, "new [name]") || !strings.Contains(got, "\nkill <id>\n") {
			t.Errorf("read ctl = %q, %v; want the usage lines", got, err)
		}
	},
	"err is empty at start": func(t *testing.T, tg target) {
		if got, err := readFile(tg, "err"); err != nil || got != "" {
			t.Errorf("read err = %q, %v; want empty", got, err)
		}
	},
	"bad global messages": func(t *testing.T, tg target) {
		writeBad(t, tg, globalBad, ctl.GlobalVerbs, "ctl", "err")
	},
	"new without runtime-level failure lists the sandbox": func(t *testing.T, tg target) {
		newSandbox(t, tg, "box1")
		got, err := tg.readDir("sandboxes")
		if err != nil || !strings.Contains(strings.Join(got, " "), "box1") {
			t.Errorf("readdir sandboxes = %v, %v; want box1", got, err)
		}
		got, err = tg.readDir("sandboxes/box1")
		if want := []string{"ctl", "status", "err", "wait", "exec", "execstatus", "procs", "fs", "watch", "console", "snapshots", "worlds", "net"}; err != nil || !sameNames(got, want) {
			t.Errorf("readdir sandboxes/box1 = %v, %v; want %v", got, err, want)
		}
		st, err := readFile(tg, "sandboxes/box1/status")
		if err != nil || !strings.HasPrefix(st, "box1 running template=base mem=256M cpus=1 ") || !strings.HasSuffix(st, "\n") {
			t.Errorf("read status = %q, %v", st, err)
		}
		if c, err := readFile(tg, "sandboxes/box1/ctl"); err != nil || c != "box1 running\n" {
			t.Errorf("read sandbox ctl = %q, %v; want %q", c, err, "box1 running\n")
		}
	},
	"snapshot, its nodes, new from it, rm": func(t *testing.T, tg target) {
		newSandbox(t, tg, "sbox")
		if err := writeFile(tg, "sandboxes/sbox/ctl", "snapshot snap5\n"); err != nil {
			t.Fatalf("snapshot snap5: %v", err)
		}
		for _, d := range []string{"sandboxes/sbox/snapshots", "snapshots"} {
			if got, err := tg.readDir(d); err != nil || !slices.Contains(got, "snap5") {
				t.Errorf("readdir %s = %v, %v; want snap5", d, got, err)
			}
			if got, err := tg.readDir(d + "/snap5"); err != nil || !sameNames(got, []string{"info", "ctl"}) {
				t.Errorf("readdir %s/snap5 = %v, %v; want info, ctl", d, got, err)
			}
			info, err := readFile(tg, d+"/snap5/info")
			if err != nil || !strings.HasPrefix(info, "snap5 sandbox=sbox parent=- created=") || !strings.HasSuffix(info, " mem=268435456 data=4096 disk=0 kind=full\n") {
				t.Errorf("read %s/snap5/info = %q, %v", d, info, err)
			}
		}
		if c, err := readFile(tg, "snapshots/snap5/ctl"); err != nil || c != "snap5\n" {
			t.Errorf("read snapshots/snap5/ctl = %q, %v", c, err)
		}
		named := writeRead(t, tg, "sandboxes/sbox/ctl", "snapshot\n")
		if got, err := tg.readDir("sandboxes/sbox/snapshots"); err != nil || !strings.HasSuffix(named, "\n") || !slices.Contains(got, strings.TrimSpace(named)) {
			t.Errorf("snapshot replied %q; snapshots %v, %v; want the name it chose", named, got, err)
		}
		if clones := strings.Fields(writeRead(t, tg, "sandboxes/sbox/ctl", "clone 2\n")); len(clones) != 2 {
			t.Errorf("clone 2 replied %q; want two ids", clones)
		} else if c, err := readFile(tg, "sandboxes/"+clones[1]+"/ctl"); err != nil || c != clones[1]+" running\n" {
			t.Errorf("clone %s: ctl %q, %v", clones[1], c, err)
		}
		if c, err := readFile(tg, "sandboxes/sbox/ctl"); err != nil || c != "sbox running\n" {
			t.Errorf("a fresh open of sbox's ctl reads %q, %v; want its state", c, err)
		}
		if err := writeFile(tg, "sandboxes/sbox/ctl", "rollback nosuch\n"); errnoOf(err) != syscall.ENOENT {
			t.Errorf("rollback nosuch = %v; want ENOENT", err)
		}
		if got, _ := readFile(tg, "sandboxes/sbox/err"); got != "rollback: no snapshot \"nosuch\"\n" {
			t.Errorf("err after rollback nosuch = %q", got)
		}
		writeBad(t, tg, []badInput{{"unknown verb", "bogus\n"}, {"rm with an argument", "rm x\n"}}, ctl.SnapshotVerbs, "snapshots/snap5/ctl", "err")
		for _, m := range []string{"kill sbox\n", "rm sbox\n", "new sbox2 from=snap5\n"} {
			if err := writeFile(tg, "ctl", m); err != nil {
				t.Fatalf("write ctl %q: %v", m, err)
			}
		}
		if err := writeFile(tg, "sandboxes/sbox2/ctl", "rollback snap5\n"); errnoOf(err) != syscall.EINVAL {
			t.Errorf("rollback to another sandbox's snapshot = %v; want EINVAL", err)
		}
		if err := writeFile(tg, "snapshots/snap5/ctl", "rm\n"); err != nil {
			t.Fatalf("rm snap5: %v", err)
		}
		if _, err := readFile(tg, "snapshots/snap5/info"); errnoOf(err) != syscall.ENOENT {
			t.Errorf("info after rm: %v; want ENOENT", err)
		}
	},
	"new of an existing name": func(t *testing.T, tg target) {
		newSandbox(t, tg, "dup")
		err := writeFile(tg, "ctl", "new dup\n")
		if errnoOf(err) != syscall.EEXIST {
			t.Errorf("second new dup = %v; want EEXIST", err)
		}
		if got, _ := readFile(tg, "err"); !strings.HasPrefix(got, "new: ") || !strings.Contains(got, `"dup"`) {
			t.Errorf("err = %q; want a new: error naming \"dup\"", got)
		}
	},
	"bad sandbox messages": func(t *testing.T, tg target) {
		newSandbox(t, tg, "box2")
		writeBad(t, tg, sandboxBad, ctl.SandboxVerbs, "sandboxes/box2/ctl", "sandboxes/box2/err")
	},
	"verb in the wrong state": func(t *testing.T, tg target) {
		newSandbox(t, tg, "box3")
		err := writeFile(tg, "sandboxes/box3/ctl", "resume\n")
		if errnoOf(err) != syscall.EBUSY {
			t.Errorf("resume on running = %v; want EBUSY", err)
		}
		if got, _ := readFile(tg, "sandboxes/box3/err"); !strings.HasPrefix(got, "resume: ") || !strings.Contains(got, "running") {
			t.Errorf("err = %q; want resume: ... running", got)
		}
	},
	"pause, resume, kill, rm": func(t *testing.T, tg target) {
		newSandbox(t, tg, "box4")
		for _, step := range []struct{ file, msg, state string }{
			{"sandboxes/box4/ctl", "pause\n", "paused"},
			{"sandboxes/box4/ctl", "resume\n", "running"},
			{"ctl", "kill box4\n", "dead"},
		} {
			if err := writeFile(tg, step.file, step.msg); err != nil {
				t.Fatalf("write %s %q: %v", step.file, step.msg, err)
			}
			if c, _ := readFile(tg, "sandboxes/box4/ctl"); c != "box4 "+step.state+"\n" {
				t.Errorf("after %q: ctl = %q; want state %s", step.msg, c, step.state)
			}
		}
		if err := writeFile(tg, "ctl", "rm box4\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := readFile(tg, "sandboxes/box4/status"); errnoOf(err) != syscall.ENOENT {
			t.Errorf("status after rm: %v; want ENOENT", err)
		}
	},
	"read-only files refuse writes": func(t *testing.T, tg target) {
		newSandbox(t, tg, "box5")
		for _, p := range []string{"err", "sandboxes/box5/status", "sandboxes/box5/err", "sandboxes/box5/wait"} {
			if err := writeFile(tg, p, "x\n"); errnoOf(err) != syscall.EACCES {
				t.Errorf("write %s = %v; want EACCES", p, err)
			}
		}
	},
	"no such sandbox": func(t *testing.T, tg target) {
		if _, err := readFile(tg, "sandboxes/nosuch/status"); errnoOf(err) != syscall.ENOENT {
			t.Errorf("read sandboxes/nosuch/status = %v; want ENOENT", err)
		}
		if _, err := readFile(tg, "nosuch"); errnoOf(err) != syscall.ENOENT {
			t.Errorf("read /nosuch = %v; want ENOENT", err)
		}
	},
	"clone configures and starts": func(t *testing.T, tg target) {
		f, err := tg.open("clone", os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 100)
		n, err := f.Read(b)
		id := strings.TrimSuffix(string(b[:n]), "\n")
		if err != nil || id == "" || !strings.HasSuffix(string(b[:n]), "\n") {
			t.Fatalf("read clone = %q, %v", b[:n], err)
		}
		for _, m := range []string{"cpus 2\n", "mem 512M\n", "start\n"} {
			if _, err := f.Write([]byte(m)); err != nil {
				t.Fatalf("write %q on clone: %v", m, err)
			}
		}
		if _, err := f.Write([]byte("bogus\n")); errnoOf(err) != syscall.EINVAL {
			t.Errorf("write bogus on clone = %v; want EINVAL", err)
		}
		if got, _ := readFile(tg, "err"); got != "ctl: unknown verb \"bogus\"\n" {
			t.Errorf("/err after bad clone write = %q", got)
		}
		if got, _ := readFile(tg, "sandboxes/"+id+"/err"); got != "ctl: unknown verb \"bogus\"\n" {
			t.Errorf("sandbox err after bad clone write = %q", got)
		}
		f.Close()
		st, err := readFile(tg, "sandboxes/"+id+"/status")
		if err != nil || !strings.HasPrefix(st, id+" running template=base mem=512M cpus=2 ") {
			t.Errorf("status of started clone = %q, %v", st, err)
		}
	},
	"clone not started is released at close": func(t *testing.T, tg target) {
		f, err := tg.open("clone", os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 100)
		n, _ := f.Read(b)
		id := strings.TrimSpace(string(b[:n]))
		if c, err := readFile(tg, "sandboxes/"+id+"/ctl"); err != nil || c != id+" new\n" {
			t.Errorf("reserved sandbox ctl = %q, %v; want state new", c, err)
		}
		f.Close()
		// FUSE sends RELEASE asynchronously after close(2).
		deadline := time.Now().Add(3 * time.Second)
		for {
			_, err := readFile(tg, "sandboxes/"+id+"/status")
			if errnoOf(err) == syscall.ENOENT {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %s still there after close: %v", id, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	},
	"wait returns on a state change": func(t *testing.T, tg target) {
		newSandbox(t, tg, "w1")
		f, err := tg.open("sandboxes/w1/wait", os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got := make(chan string, 1)
		go func() {
			b, err := io.ReadAll(f)
			got <- fmt.Sprint(string(b), err)
		}()
		select {
		case g := <-got:
			t.Fatalf("wait returned before any change: %q", g)
		case <-time.After(200 * time.Millisecond):
		}
		if err := writeFile(tg, "sandboxes/w1/ctl", "pause\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if !strings.HasPrefix(g, "w1 paused ") || !strings.HasSuffix(g, "\n<nil>") {
				t.Errorf("wait = %q; want the paused status line", g)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("wait did not return after pause")
		}
	},
	"wait ends when interrupted": func(t *testing.T, tg target) {
		newSandbox(t, tg, "w2")
		switch tg := tg.(type) {
		case osTarget:
			catInterrupted(t, filepath.Join(tg.dir, "sandboxes/w2/wait"))
		case inproc:
			f, err := tg.open("sandboxes/w2/wait", os.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			f.(*inprocFile).ctx = ctx
			if _, err := f.Read(make([]byte, 100)); errnoOf(err) != syscall.EINTR && errnoOf(err) != syscall.ETIMEDOUT {
				t.Errorf("cancelled wait = %v; want EINTR or ETIMEDOUT", err)
			}
			f.Close()
		case p9Target:
			f, err := tg.open("sandboxes/w2/wait", os.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() { _, err := f.Read(make([]byte, 100)); res <- err }()
			time.Sleep(200 * time.Millisecond)
			go f.Close() // Tclunk while the Tread is pending
			select {
			case err := <-res:
				if errnoOf(err) != syscall.EINTR {
					t.Errorf("wait read after clunk = %v; want EINTR", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("wait read still blocked 5s after its fid was clunked")
			}
		}
		// The sandbox is still served and a new wait still works.
		if c, err := readFile(tg, "sandboxes/w2/ctl"); err != nil || c != "w2 running\n" {
			t.Errorf("after interrupt: ctl = %q, %v", c, err)
		}
	},
	"text is one snapshot per open": func(t *testing.T, tg target) {
		newSandbox(t, tg, "snap")
		f, err := tg.open("sandboxes/snap/ctl", os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 3)
		n, err := f.Read(b) // "sna": the text is generated now
		if err != nil || n != 3 {
			t.Fatalf("first read = %d, %v", n, err)
		}
		if err := writeFile(tg, "sandboxes/snap/ctl", "pause\n"); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(f)
		if got := string(b) + string(rest); err != nil || got != "snap running\n" {
			t.Errorf("reads across a change = %q, %v; want the text as of the first read", got, err)
		}
	},
}

// checkOrder is the checks' names, sorted, the ones that need a fresh
// tree first.
func checkOrder() []string {
	names := []string{"err is empty at start"}
	var rest []string
	for n := range checks {
		if n != names[0] {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

func TestTree(t *testing.T) {
	for tname, mk := range makeTargets {
		t.Run(tname, func(t *testing.T) {
			e := newEnv(t, "")
			tg := mk(t, e)
			for _, cname := range checkOrder() {
				t.Run(cname, func(t *testing.T) { checks[cname](t, tg) })
			}
		})
	}
}

// TestConcurrentClients drives one tree from every target at once.
func TestConcurrentClients(t *testing.T) {
	e := newEnv(t, "")
	tgs := map[string]target{}
	for name, mk := range makeTargets {
		tgs[name] = mk(t, e)
	}
	newSandbox(t, tgs["inproc"], "shared")
	var wg sync.WaitGroup
	for name, tg := range tgs {
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					if st, err := readFile(tg, "sandboxes/shared/status"); err != nil || !strings.HasPrefix(st, "shared ") {
						t.Errorf("%s: status = %q, %v", name, st, err)
						return
					}
					if err := writeFile(tg, "sandboxes/shared/ctl", "bogus\n"); errnoOf(err) != syscall.EINVAL {
						t.Errorf("%s: bogus = %v; want EINVAL", name, err)
						return
					}
					if err := writeFile(tg, "ctl", "new\n"); errnoOf(err) != 0 {
						t.Errorf("%s: new = %v", name, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := len(e.plane.Sandboxes()); got != 1+len(tgs)*3*30 {
		t.Errorf("%d sandboxes; want %d", got, 1+len(tgs)*3*30)
	}
}

// TestRestartKeepsState closes the plane and serves the same state
// directory again: the sandbox is still there, over FUSE.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	p, err := ctl.Open(dir, fakeRuntime{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{plane: p, tree: nil, dir: dir}
	e.tree = sfsNew(p)
	newSandbox(t, inproc{e.tree.Root()}, "keep")
	if err := writeFile(inproc{e.tree.Root()}, "sandboxes/keep/ctl", "pause\n"); err != nil {
		t.Fatal(err)
	}
	p.Close()

	e2 := newEnv(t, dir)
	tg := mountFUSE(t, e2.tree.Root())
	st, err := readFile(tg, "sandboxes/keep/status")
	if err != nil || !strings.HasPrefix(st, "keep paused ") {
		t.Errorf("status after restart = %q, %v; want keep paused", st, err)
	}
}

// TestTCPTokenRequired: attach over TCP needs the token as aname.
func TestTCPTokenRequired(t *testing.T) {
	e := newEnv(t, "")
	addr := serve9P(t, e.tree.Root(), "tcp", "tok3n")
	for _, aname := range []string{"", "/", "wrong", "tok3n2"} {
		if _, err := dial9P(t, addr, aname); errnoOf(err) != syscall.EPERM {
			t.Errorf("attach %q = %v; want EPERM", aname, err)
		}
	}
	root, err := dial9P(t, addr, "tok3n")
	if err != nil {
		t.Fatalf("attach with the token: %v", err)
	}
	if _, err := readFile(p9Target{root}, "ctl"); err != nil {
		t.Errorf("read ctl with the token: %v", err)
	}
}

var _ = context.Background
