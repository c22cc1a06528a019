package guestlab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// worldDev is a git repository with a small C project, the lower of
// TestWorldDev; dev.sh is what the guest user runs in it.
var worldDev = map[string]string{
	"hello.c":    "#include <stdio.h>\n#include \"config.h\"\nint main(void) { puts(GREETING); return 0; }\n",
	".gitignore": "hello\n*.o\nconfig.h\n",
	"configure": `#!/bin/sh
# Finds a C compiler and writes config.h, as a configure script does.
for cc in ${CC:-} cc gcc; do command -v "$cc" >/dev/null && break; done
echo 'int main(void) { return 0; }' > conftest.c
"$cc" -o conftest conftest.c || { echo "configure: $cc cannot build a program" >&2; exit 1; }
rm -f conftest conftest.c
echo '#define GREETING "hello"' > config.h
echo "CC = $cc" > config.mk
echo "configure: using $cc"
`,
	"Makefile": "include config.mk\nhello: hello.o\n\t$(CC) -o $@ hello.o\nhello.o: hello.c config.h\n\t$(CC) -c hello.c\n",
	"dev.sh": `set -e
cd /workspace
echo "uid $(id -u), /workspace $(stat -c %u:%g .), hello.c $(stat -c %u:%g hello.c)"
git status --short
sed -i 's/GREETING/GREETING ", world"/' hello.c
git diff --stat | tail -n 1
git -c user.name=guest -c user.email=guest@sandbox commit -q -am 'from the guest'
git log --format=%s
./configure
make -s
./hello
`,
}

// TestWorldDev: the guest's default user works in a git repository
// lower at /workspace as in a checkout of its own: the files show as its
// own (the owner's, through the world's id map), git status, diff and
// commit work, a C project configures and builds; the commit and the
// edit reach the lower with apply, where the host's git sees a sound
// repository with the guest's commit on top.
func TestWorldDev(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := t.TempDir()
	for _, p := range []string{filepath.Dir(lower), lower} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range worldDev {
		mode := os.FileMode(0o644)
		if name == "configure" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(lower, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", lower, "-c", "user.name=host", "-c", "user.email=host@sandfs"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "initial")

	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'new g template=base world=w' > ctl")
	d.waitAgent(t, "g")
	out := d.mustSh(t, `cd sandboxes/g; exec 3<>procs/clone; read n <&3; echo 'user user' >&3; echo "exec 'sh /workspace/dev.sh 2>&1'" >&3; cat procs/$n/stdout; cat procs/$n/wait`)
	want := "uid 1000, /workspace 1000:1000, hello.c 1000:1000\n" +
		" 1 file changed, 1 insertion(+), 1 deletion(-)\n" +
		"from the guest\ninitial\n" +
		"configure: using cc\n" +
		"hello, world\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, " exited code=0 ") {
		t.Fatalf("as the guest user in /workspace:\n%s\nwant:\n%s<slot> exited code=0 ...", out, want)
	}
	diff := d.mustSh(t, "cat worlds/w/diff")
	for _, w := range []string{"modified hello.c\n", "added hello\n", "added config.h\n"} {
		if !strings.Contains(diff, w) {
			t.Errorf("diff lacks %q:\n%s", w, diff)
		}
	}
	if got := git("log", "--format=%s"); got != "initial\n" {
		t.Errorf("the lower's log before apply = %q", got)
	}
	d.mustSh(t, "echo apply > worlds/w/ctl")
	if got := git("log", "--format=%s"); got != "from the guest\ninitial\n" {
		t.Errorf("the lower's log after apply = %q, want the guest's commit on top", got)
	}
	git("fsck", "--no-dangling")
	if got := git("status", "--short"); got != "" {
		t.Errorf("the lower's status after apply = %q, want clean (build products ignored)", got)
	}
	if b, err := os.ReadFile(filepath.Join(lower, "hello.c")); err != nil || !strings.Contains(string(b), `GREETING ", world"`) {
		t.Errorf("the lower's hello.c after apply = %q, %v", b, err)
	}
}
