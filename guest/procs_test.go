package guest

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl/msg"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

func TestExitCode(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	for _, tc := range []struct {
		cmd  string
		want string // state and code or signal
	}{
		{"exit 0", "exited code=0"},
		{"exit 3", "exited code=3"},
		{"kill -9 $$", "killed signal=9"},
	} {
		n, _ := newProcess(t, root, "exec "+msg.Quote(tc.cmd))
		got := waitLine(t, root, n)
		m := fields(got)
		if m["n"] != n || !strings.HasPrefix(got, n+" "+tc.want+" pid=") {
			t.Errorf("%q: wait = %q, want %q", tc.cmd, got, n+" "+tc.want+" pid=…")
		}
		if st := readFile(t, root, "procs/"+n+"/status"); st != got {
			t.Errorf("%q: status = %q, wait said %q", tc.cmd, st, got)
		}
		ctl := readFile(t, root, "procs/"+n+"/ctl")
		if want := fmt.Sprintf("%s %s %s\n", n, m["state"], m["pid"]); ctl != want {
			t.Errorf("%q: ctl read = %q, want %q", tc.cmd, ctl, want)
		}
	}
}

func TestStdoutStderr(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, _ := newProcess(t, root, `exec 'echo out1; echo err1 >&2; echo out2; echo "it''s" >&2'`)
	if got := readFile(t, root, "procs/"+n+"/stdout"); got != "out1\nout2\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := readFile(t, root, "procs/"+n+"/stderr"); got != "err1\nit's\n" {
		t.Errorf("stderr = %q", got)
	}
	waitLine(t, root, n)
}

func TestStdinRoundTrip(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, ctl := newProcess(t, root, "start cat")
	in := openFile(t, root, "procs/"+n+"/stdin", p9.WriteOnly)
	out := openFile(t, root, "procs/"+n+"/stdout", p9.ReadOnly)
	msg := "hello\x00\xff world\n"
	mustWrite(t, in, msg)
	buf := make([]byte, 100)
	var got []byte
	for len(got) < len(msg) {
		k, err := out.ReadAt(buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
	}
	if string(got) != msg {
		t.Errorf("echoed %q, want %q", got, msg)
	}
	mustWrite(t, ctl, "closestdin")
	if w := waitLine(t, root, n); !strings.Contains(w, "exited code=0") {
		t.Errorf("wait = %q", w)
	}
	if err := write(in, "late"); !errors.Is(err, linux.EPIPE) {
		t.Errorf("write after exit: %v, want EPIPE", err)
	}
}

func TestBigOutput(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	data := make([]byte, 10<<20)
	rand.Read(data)
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	n, _ := newProcess(t, root, "start cat "+msg.Quote(file))
	got := readFile(t, root, "procs/"+n+"/stdout")
	if len(got) != len(data) || sha256.Sum256([]byte(got)) != sha256.Sum256(data) {
		t.Errorf("stdout: %d bytes sha %x, want %d bytes sha %x", len(got), sha256.Sum256([]byte(got)), len(data), sha256.Sum256(data))
	}
	waitLine(t, root, n)
}

func TestSignals(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	for _, tc := range []struct {
		sig  string
		want string
	}{
		{"TERM", "killed signal=15"},
		{"KILL", "killed signal=9"},
		{"SIGINT", "killed signal=2"},
		{"10", "killed signal=10"},
	} {
		n, ctl := newProcess(t, root, "start sleep 100")
		if st := readFile(t, root, "procs/"+n+"/status"); !strings.HasPrefix(st, n+" running pid=") {
			t.Errorf("status = %q, want running", st)
		}
		mustWrite(t, ctl, "signal "+tc.sig)
		if got := waitLine(t, root, n); !strings.HasPrefix(got, n+" "+tc.want+" ") {
			t.Errorf("signal %s: wait = %q, want %q", tc.sig, got, tc.want)
		}
		if err := write(ctl, "signal KILL"); !errors.Is(err, linux.EBUSY) {
			t.Errorf("signal after exit: %v, want EBUSY", err)
		}
	}
	// A trapped TERM: the shell exits with its own code.
	n, ctl := newProcess(t, root, `exec 'trap "exit 7" TERM; while :; do sleep 0.05; done'`)
	time.Sleep(200 * time.Millisecond)
	mustWrite(t, ctl, "signal TERM")
	if got := waitLine(t, root, n); !strings.Contains(got, "exited code=7") {
		t.Errorf("trapped TERM: %q", got)
	}
}

func TestPTY(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, _ := newProcess(t, root, "pty on", "exec tty")
	if got := readFile(t, root, "procs/"+n+"/stdout"); !strings.HasPrefix(got, "/dev/pts/") {
		t.Errorf("tty printed %q", got)
	}
	if got := readFile(t, root, "procs/"+n+"/stderr"); got != "" {
		t.Errorf("stderr with pty = %q", got)
	}
	waitLine(t, root, n)

	n, _ = newProcess(t, root, "pty on", "size 30 100", "exec 'stty size'")
	if got := readFile(t, root, "procs/"+n+"/stdout"); strings.TrimSpace(got) != "30 100" {
		t.Errorf("stty size = %q, want 30 100", got)
	}
	waitLine(t, root, n)

	// Resize while running, then ask.
	n, ctl := newProcess(t, root, "pty on", "exec 'stty -echo; read x; stty size'")
	time.Sleep(200 * time.Millisecond)
	mustWrite(t, ctl, "size 40 120")
	in := openFile(t, root, "procs/"+n+"/stdin", p9.WriteOnly)
	mustWrite(t, in, "go\n")
	if got := readFile(t, root, "procs/"+n+"/stdout"); !strings.Contains(got, "40 120") {
		t.Errorf("after resize: %q", got)
	}
	waitLine(t, root, n)
}

func TestUser(t *testing.T) {
	needRoot(t)
	etc := t.TempDir()
	home := t.TempDir()
	os.Chown(home, 4243, 4243)
	os.Chmod(filepath.Dir(home), 0o755)
	os.MkdirAll(filepath.Join(etc, "etc"), 0o755)
	os.WriteFile(filepath.Join(etc, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\ntuser:x:4243:4243:t:"+home+":/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "etc/group"), []byte("root:x:0:\ntuser:x:4243:\nextra:x:4300:tuser\n"), 0o644)
	ts := newTestServer(t, Options{Etc: etc})
	_, root := ts.dial()

	n, _ := newProcess(t, root, "user tuser", `exec 'id -u; id -g; id -G; echo $HOME $USER $LOGNAME; pwd'`)
	want := fmt.Sprintf("4243\n4243\n4243 4300\n%s tuser tuser\n%s\n", home, home)
	if got := readFile(t, root, "procs/"+n+"/stdout"); got != want {
		t.Errorf("as tuser: %q, want %q", got, want)
	}
	n, _ = newProcess(t, root, "user 4242:4244", `exec 'id -u; id -g'`)
	if got := readFile(t, root, "procs/"+n+"/stdout"); got != "4242\n4244\n" {
		t.Errorf("as 4242:4244: %q", got)
	}
	// The user cannot write where root owns.
	dir := t.TempDir()
	n, _ = newProcess(t, root, "user tuser", "exec "+msg.Quote("touch "+dir+"/x"))
	if got := waitLine(t, root, n); !strings.Contains(got, "exited code=1") {
		t.Errorf("touch as tuser in root's dir: %q", got)
	}
}

func TestCwdEnv(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	dir := t.TempDir()
	n, _ := newProcess(t, root, "cwd "+msg.Quote(dir), "env FOO='a b' BAR=1", "env BAR=2 'EMPTY='", `exec 'pwd; echo "$FOO|$BAR|$EMPTY|$HOME"'`)
	want := dir + "\na b|2||/root\n"
	if got := readFile(t, root, "procs/"+n+"/stdout"); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestStartErrors(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	for _, tc := range []struct {
		msgs  []string
		errno linux.Errno
		text  string
	}{
		{[]string{"start /nonexistent/cmd"}, linux.ENOENT, `start: command "/nonexistent/cmd" not found`},
		{[]string{"start no-such-command-xyz"}, linux.ENOENT, `start: command "no-such-command-xyz" not found in PATH`},
		{[]string{"cwd /nonexistent", "start true"}, linux.ENOENT, `start: cwd "/nonexistent" does not exist`},
		{[]string{"cwd /etc/passwd", "start true"}, linux.ENOTDIR, `start: cwd "/etc/passwd" is not a directory`},
		{[]string{"user nosuchuser", "start true"}, linux.ENOENT, `start: user: no such user "nosuchuser"`},
		{[]string{"start /etc/passwd"}, linux.EACCES, `start: command "/etc/passwd": permission denied`},
		{[]string{"bogus"}, linux.EINVAL, `ctl: unknown verb "bogus"`},
		{[]string{"size 1"}, linux.EINVAL, `size: missing argument "size 1" (usage: size ROWS COLS)`},
		{[]string{"signal TERM"}, linux.EBUSY, `signal: process is new; need running`},
		{[]string{"start 'unterminated"}, linux.EINVAL, `ctl: unterminated quote "start 'unterminated"`},
		{[]string{"pty on\nstart true"}, linux.EINVAL, `ctl: more than one line "pty on\nstart true"`},
	} {
		ctl := openFile(t, root, "procs/clone", p9.ReadWrite)
		n := strings.TrimSpace(string(readAll(t, ctl)))
		var err error
		for _, m := range tc.msgs {
			if err = write(ctl, m); err != nil {
				break
			}
		}
		if !errors.Is(err, tc.errno) {
			t.Errorf("%q: err %v, want %v", tc.msgs, err, tc.errno)
		}
		if got := readFile(t, root, "procs/"+n+"/err"); got != tc.text+"\n" {
			t.Errorf("%q: err file %q, want %q", tc.msgs, got, tc.text)
		}
		if strings.HasPrefix(tc.text, "start:") {
			st := readFile(t, root, "procs/"+n+"/status")
			if want := fmt.Sprintf("%s failed errno=%d\n", n, tc.errno); st != want {
				t.Errorf("%q: status %q, want %q", tc.msgs, st, want)
			}
			if err := write(ctl, "start true"); !errors.Is(err, linux.EBUSY) {
				t.Errorf("%q: second start: %v, want EBUSY", tc.msgs, err)
			}
		}
	}
}

func TestConcurrent(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := newProcess(t, root, fmt.Sprintf("exec 'for j in 1 2 3; do echo %d-$j; sleep 0.01; done; exit %d'", i, i))
			want := fmt.Sprintf("%d-1\n%d-2\n%d-3\n", i, i, i)
			if got := readFile(t, root, "procs/"+n+"/stdout"); got != want {
				t.Errorf("proc %d: %q", i, got)
			}
			if got := waitLine(t, root, n); !strings.Contains(got, fmt.Sprintf("exited code=%d ", i)) {
				t.Errorf("proc %d: %q", i, got)
			}
		}()
	}
	wg.Wait()
}

func TestOutlivesConnection(t *testing.T) {
	ts := newTestServer(t, Options{})
	cl, root := ts.dial()
	n, _ := newProcess(t, root, `exec 'sleep 0.3; echo done'`)
	// A blocking read in flight when the connection goes must end.
	readDone := make(chan error, 1)
	go func() {
		f, err := walk(t, root, "procs/"+n+"/wait")
		if err == nil {
			if _, _, err = f.Open(p9.ReadOnly); err == nil {
				_, err = f.ReadAt(make([]byte, 100), 0)
			}
		}
		readDone <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cl.Close()
	select {
	case <-readDone:
	case <-time.After(5 * time.Second):
		t.Fatal("blocking read did not end when its connection closed")
	}
	_, root2 := ts.dial()
	if got := waitLine(t, root2, n); !strings.HasPrefix(got, n+" exited code=0") {
		t.Errorf("after reconnect: wait = %q", got)
	}
	if got := readFile(t, root2, "procs/"+n+"/stdout"); got != "done\n" {
		t.Errorf("after reconnect: stdout = %q", got)
	}
}

func TestBlockedStreamEndsWithConnection(t *testing.T) {
	ts := newTestServer(t, Options{})
	cl, root := ts.dial()
	n, _ := newProcess(t, root, "start sleep 100")
	out := openFile(t, root, "procs/"+n+"/stdout", p9.ReadOnly)
	done := make(chan struct{})
	go func() { out.ReadAt(make([]byte, 10), 0); close(done) }()
	time.Sleep(50 * time.Millisecond)
	cl.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stdout read did not end when its connection closed")
	}
	_, root2 := ts.dial()
	if st := readFile(t, root2, "procs/"+n+"/status"); !strings.Contains(st, "running") {
		t.Errorf("process died with the connection: %q", st)
	}
	ctl := openFile(t, root2, "procs/"+n+"/ctl", p9.WriteOnly)
	mustWrite(t, ctl, "signal KILL")
	waitLine(t, root2, n)
}

func TestFree(t *testing.T) {
	ts := newTestServer(t, Options{Retention: 100 * time.Millisecond})
	_, root := ts.dial()
	// Never started: gone when the clone handle closes.
	ctl := openFile(t, root, "procs/clone", p9.ReadWrite)
	n := strings.TrimSpace(string(readAll(t, ctl)))
	ctl.Close()
	if _, err := walk(t, root, "procs/"+n); !errors.Is(err, linux.ENOENT) {
		t.Errorf("unstarted slot after close: walk err %v, want ENOENT", err)
	}
	// A freed slot cannot be started.
	ctl = openFile(t, root, "procs/clone", p9.ReadWrite)
	mustWrite(t, ctl, "free")
	if err := write(ctl, "start true"); !errors.Is(err, linux.ENOENT) {
		t.Errorf("start after free: %v, want ENOENT", err)
	}
	// free while running is refused; after exit it works at once.
	n, ctl = newProcess(t, root, "start sleep 100")
	if err := write(ctl, "free"); !errors.Is(err, linux.EBUSY) {
		t.Errorf("free while running: %v", err)
	}
	mustWrite(t, ctl, "signal KILL")
	waitLine(t, root, n)
	mustWrite(t, ctl, "free")
	if _, err := walk(t, root, "procs/"+n); !errors.Is(err, linux.ENOENT) {
		t.Errorf("after free: %v", err)
	}
	// Retention: kept while open, gone after the retention once closed.
	n, ctl = newProcess(t, root, "start true")
	waitLine(t, root, n)
	time.Sleep(200 * time.Millisecond)
	if _, err := walk(t, root, "procs/"+n); err != nil {
		t.Errorf("open slot freed: %v", err)
	}
	ctl.Close()
	if _, err := walk(t, root, "procs/"+n); !errors.Is(err, linux.ENOENT) {
		t.Errorf("closed slot after retention: %v", err)
	}
}

func TestProcsListing(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, _ := newProcess(t, root, "start true")
	d := openFile(t, root, "procs", p9.ReadOnly)
	ents, err := d.Readdir(0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if strings.Join(names, " ") != "clone "+n {
		t.Errorf("procs/ = %v", names)
	}
	d = openFile(t, root, "procs/"+n, p9.ReadOnly)
	ents, _ = d.Readdir(0, 4096)
	names = nil
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, " "); got != "ctl stdin stdout stderr status wait err config" {
		t.Errorf("procs/%s/ = %v", n, got)
	}
	_ = syscall.EINVAL
}

func TestConfig(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	dir := t.TempDir()
	msgs := []string{"cwd " + msg.Quote(dir), "env A=1 'B=x y'", "pty on", "size 30 100", "tag 'my tag'", "start /bin/sh -c 'echo \"$A$B\"'"}
	n, _ := newProcess(t, root, msgs...)
	want := "cwd " + msg.Quote(dir) + "\nenv A=1\nenv 'B=x y'\npty on\nsize 30 100\ntag 'my tag'\nstart /bin/sh -c 'echo \"$A$B\"'\n"
	cfg := readFile(t, root, "procs/"+n+"/config")
	if cfg != want {
		t.Errorf("config = %q, want %q", cfg, want)
	}
	first := readFile(t, root, "procs/"+n+"/stdout")
	// Replaying config recreates the process.
	m, _ := newProcess(t, root, strings.Split(strings.TrimSuffix(cfg, "\n"), "\n")...)
	if again := readFile(t, root, "procs/"+m+"/stdout"); again != first || first != "1x y\r\n" {
		t.Errorf("replayed output %q, first %q", again, first)
	}
}

func TestSignalGroupStdinOffPTYEOF(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	// signal ... group reaches the shell's children too.
	n, ctl := newProcess(t, root, `exec 'sleep 100 & echo $!; wait'`)
	out := openFile(t, root, "procs/"+n+"/stdout", p9.ReadOnly)
	buf := make([]byte, 64)
	k, _ := out.ReadAt(buf, 0)
	child := strings.TrimSpace(string(buf[:k]))
	mustWrite(t, ctl, "signal KILL group")
	if w := waitLine(t, root, n); !strings.Contains(w, "killed signal=9") {
		t.Errorf("group kill: %q", w)
	}
	// A killed child that has not run since (a loaded host) is still
	// there with the signal pending: give it time to die.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + child + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("child %s survived the group kill by 10 s: %s", child, b)
			break
		}
	}
	if got := readAll(t, out); len(got) != 0 {
		t.Errorf("more output: %q", got)
	}

	// stdin off: the process reads EOF at once.
	n, _ = newProcess(t, root, "stdin off", "exec 'cat; echo rc=$?'")
	if got := readFile(t, root, "procs/"+n+"/stdout"); got != "rc=0\n" {
		t.Errorf("stdin off: %q", got)
	}
	if err := write(openFile(t, root, "procs/"+n+"/stdin", p9.WriteOnly), "x"); !errors.Is(err, linux.EPIPE) {
		t.Errorf("write to stdin off: %v, want EPIPE", err)
	}

	// closestdin on a pty sends ^D: cat (canonical mode) ends.
	n, ctl = newProcess(t, root, "pty on", "start cat")
	time.Sleep(100 * time.Millisecond)
	mustWrite(t, ctl, "closestdin")
	if w := waitLine(t, root, n); !strings.Contains(w, "exited code=0") {
		t.Errorf("pty closestdin: %q", w)
	}
}
