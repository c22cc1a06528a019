package guestlab

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/testenv"
)

// newLower makes a lower for a world: a directory the VMM's uid may
// search (t.TempDir makes it and its parent 0700) holding files, each
// path to its text (0644, its directories made).
func newLower(t *testing.T, files map[string]string) string {
	t.Helper()
	lower := t.TempDir()
	for _, p := range []string{filepath.Dir(lower), lower} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range files {
		if err := os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lower, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return lower
}

// TestWorldGuest: a sandbox created with world=<w> has the world at
// /workspace: it reads the lower, its changes land in the world's upper
// (the lower untouched) and show in diff; apply writes them back.
func TestWorldGuest(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := newLower(t, map[string]string{"a.txt": "alpha\n", "d/b.txt": "beta\n"})
	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'new t template=base world=w' > ctl")
	d.waitAgent(t, "t")
	out := d.mustSh(t, `echo 'cat /workspace/a.txt; echo guest > /workspace/new.txt; rm /workspace/d/b.txt; ls /workspace /workspace/d; cat /workspace/new.txt' > sandboxes/t/exec; cat sandboxes/t/exec`)
	if want := "alpha\n/workspace:\na.txt\nd\nnew.txt\n\n/workspace/d:\nguest\n"; out != want {
		t.Errorf("in the guest:\n%s\nwant:\n%s", out, want)
	}
	if st := d.mustSh(t, "cat sandboxes/t/execstatus"); !strings.Contains(st, " exited code=0 ") {
		t.Errorf("execstatus = %q", st)
	}
	// Over the VMM's virtio-9p device, not the vsock fallback.
	if m := d.mustSh(t, `echo 'grep " /workspace " /proc/mounts' > sandboxes/t/exec; cat sandboxes/t/exec`); !strings.HasPrefix(m, "sandfs-world /workspace 9p ") || !strings.Contains(m, "trans=virtio") {
		t.Errorf("/workspace mount = %q, want sandfs-world over trans=virtio", m)
	}
	if got := d.mustSh(t, "cat worlds/w/diff; ls sandboxes/t/worlds"); got != "deleted d/b.txt\nadded new.txt\nw\n" {
		t.Errorf("diff, attached = %q", got)
	}
	if _, err := os.Stat(filepath.Join(lower, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("the lower changed before apply: %v", err)
	}
	d.mustSh(t, "echo apply > worlds/w/ctl")
	if b, err := os.ReadFile(filepath.Join(lower, "new.txt")); err != nil || string(b) != "guest\n" {
		t.Errorf("lower new.txt after apply = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(lower, "d/b.txt")); !os.IsNotExist(err) {
		t.Errorf("d/b.txt after apply: %v", err)
	}
	// The guest still sees the world, now all from the lower.
	if got := d.mustSh(t, `echo 'cat /workspace/new.txt; ls /workspace/d | wc -l' > sandboxes/t/exec; cat sandboxes/t/exec`); got != "guest\n0\n" {
		t.Errorf("after apply, in the guest: %q", got)
	}
}

// worldPOSIX is run by python3 in the guest on /workspace: the file
// operations tools use (an editor's save by rename, lock files, hard and
// symbolic links, chmod, directories, fsync, a 4 MiB file written and
// read back cold, a 1 MiB file of the lower read), each checked,
// printing "ok" at the end.
const worldPOSIX = `
import os, hashlib
os.chdir("/workspace")
open("doc.txt.tmp", "w").write("saved\n")
os.fsync(os.open("doc.txt.tmp", os.O_RDONLY))
os.rename("doc.txt.tmp", "doc.txt")
assert open("doc.txt").read() == "saved\n"
fd = os.open("lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.close(fd)
try:
    os.open("lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644); raise SystemExit("O_EXCL twice")
except FileExistsError:
    pass
os.unlink("lock")
os.link("a.txt", "hard.txt")
assert os.stat("hard.txt").st_ino == os.stat("a.txt").st_ino and os.stat("a.txt").st_nlink == 2
os.symlink("a.txt", "sym")
assert os.readlink("sym") == "a.txt" and open("sym").read() == "alpha\n"
os.chmod("doc.txt", 0o600)
assert os.stat("doc.txt").st_mode & 0o777 == 0o600
os.makedirs("x/y/z")
os.rmdir("x/y/z")
os.rename("x", "x2")
assert sorted(os.listdir("x2")) == ["y"]
try:
    os.rmdir("d"); raise SystemExit("rmdir of a non-empty dir")
except OSError:
    pass
big = open("big.lower", "rb").read()
assert hashlib.sha256(big).hexdigest() == open("big.sha").read().strip(), "big.lower read wrong"
data = os.urandom(4 << 20)
open("big.bin", "wb").write(data)
assert hashlib.sha256(open("big.bin", "rb").read()).digest() == hashlib.sha256(data).digest()
os.sync()
open("/proc/sys/vm/drop_caches", "w").write("3\n")
assert hashlib.sha256(open("big.bin", "rb").read()).digest() == hashlib.sha256(data).digest(), "big.bin read cold"
print(open("host").read().strip())
print("ok")
`

// TestWorldGuestPOSIX: POSIX file operations inside the guest on
// /workspace behave as on a local file system, the lower is untouched,
// and a symbolic link in the lower is the guest's to follow (to the
// guest's own files, never the host's).
func TestWorldGuestPOSIX(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := newLower(t, map[string]string{"a.txt": "alpha\n", "d/b.txt": "beta\n"})
	if err := os.Symlink("/etc/hostname", filepath.Join(lower, "host")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "posix.py"), []byte(worldPOSIX), 0o644); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20+4321) // a tail under a passed read's 64 KiB
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	sum := sha256.Sum256(big)
	if err := os.WriteFile(filepath.Join(lower, "big.lower"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "big.sha"), []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'new p template=base world=w' > ctl")
	d.waitAgent(t, "p")
	out := d.mustSh(t, `echo 'python3 /workspace/posix.py 2>&1' > sandboxes/p/exec; cat sandboxes/p/exec`)
	if out != "p\nok\n" { // the guest's host name: /etc/hostname is the guest's
		t.Errorf("posix.py in the guest:\n%s", out)
	}
	diff := d.mustSh(t, "cat worlds/w/diff")
	for _, want := range []string{"modified a.txt\n", "added big.bin\n", "added doc.txt\n", "added hard.txt\n", "added sym\n", "added x2\n"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if ents, _ := os.ReadDir(lower); len(ents) != 6 {
		t.Errorf("the lower changed: %v", ents)
	}
	dev := deviceIO(t, d, "p")
	t.Logf("the VMM kept %d passed files and answered %d reads, writes and fsyncs on them; %d passed reads", dev.files, dev.local, dev.passed)
	if dev.files == 0 || dev.local == 0 {
		t.Errorf("the guest's reads and writes of open files were not answered by its VMM on passed files (docs/worlds.md)")
	}
}

// devIO is what sandbox's virtio-9p device did itself on descriptors
// the daemon passed it: reads from an Rreadfd's (passed), opens answered
// with Rlopenfd (files) and the requests it answered on those (local).
type devIO struct{ passed, files, local int }

// deviceIO is sandbox id's devIO: its VMM's state dump (SIGUSR1, to
// vmm.log) says.
func deviceIO(t *testing.T, d *daemon, id string) devIO {
	t.Helper()
	pid := testenv.StatusPid(d.mustSh(t, "cat sandboxes/"+id+"/status"))
	if pid == 0 || syscall.Kill(pid, syscall.SIGUSR1) != nil {
		t.Fatalf("sandbox %s: no VMM to ask", id)
	}
	re := regexp.MustCompile(`9p: open=.* passed=([0-9]+) .* files=([0-9]+) local=([0-9]+)`)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(d.dir, "st/run", id, "vmm.log"))
		if m := re.FindAllSubmatch(b, -1); len(m) > 0 {
			last := m[len(m)-1]
			var n [3]int
			for i := range n {
				n[i], _ = strconv.Atoi(string(last[i+1]))
			}
			return devIO{passed: n[0], files: n[1], local: n[2]}
		}
	}
	t.Fatalf("sandbox %s: its VMM's dump has no virtio-9p line", id)
	return devIO{}
}
