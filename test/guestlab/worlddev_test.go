package guestlab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sandfs/test/testenv"
)

// worldDev is a git repository with a small C project, the lower of
// TestWorldDev; dev.sh is what the guest user runs in it.
var worldDev = map[string]string{
	"hello.c":    "#include <stdio.h>\n#include \"config.h\"\nint main(void) { puts(GREETING); return 0; }\n",
	".gitignore": "hello\n*.o\nconfig.h\nconfig.mk\n",
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

// TestWorldDev: the guest's default user works in a world over a git
// repository as in a checkout of its own. The lab has no git, so a
// guest makes the repository: in world w1 the user runs git init, add
// and commit, and apply writes the repository into the lower. Then in a
// second world w2 over that lower the files show as the user's (the
// owner's, through the world's id map), git status, diff and commit
// work, and a C project configures and builds; apply brings the commit
// and the edit to the lower, where the first sandbox, told to forget its
// caches, sees a sound repository with both commits and a clean status.
func TestWorldDev(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := newLower(t, worldDev)
	if err := os.Chmod(filepath.Join(lower, "configure"), 0o755); err != nil {
		t.Fatal(err)
	}
	// asUser runs script as the guest user in sandbox id (procs/, as
	// E2B's commands run) and returns its output and end.
	// Compiling under the lab's emulation is slow: each step has 5
	// minutes, not mustSh's 90 s.
	asUser := func(id, script string) string {
		t.Helper()
		out, err := testenv.ShWithin(d.mnt, "cd sandboxes/"+id+"; exec 3<>procs/clone; read n <&3; echo 'user user' >&3; echo \"exec '"+script+" 2>&1'\" >&3; cat procs/$n/stdout; cat procs/$n/wait", 5*time.Minute)
		if err != nil {
			t.Fatalf("as the guest user in %s: %v\n%s", id, err, out)
		}
		return out
	}
	git := "git -c user.name=guest -c user.email=guest@sandbox"

	d.mustSh(t, "echo 'world w1 lower="+lower+"' > ctl; echo 'new g1 template=base world=w1' > ctl")
	d.waitAgent(t, "g1")
	if out := asUser("g1", "cd /workspace && "+git+" init -q -b main && "+git+" add . && "+git+" commit -q -m initial && echo made"); !strings.HasPrefix(out, "made\n") || !strings.Contains(out, " exited code=0 ") {
		t.Fatalf("git init and commit in w1:\n%s", out)
	}
	d.mustSh(t, "echo apply > worlds/w1/ctl")
	if _, err := os.Stat(filepath.Join(lower, ".git/HEAD")); err != nil {
		t.Fatalf("the lower after w1's apply: %v", err)
	}

	d.mustSh(t, "echo 'world w2 lower="+lower+"' > ctl; echo 'new g2 template=base world=w2' > ctl")
	d.waitAgent(t, "g2")
	out := asUser("g2", "sh /workspace/dev.sh")
	want := "uid 1000, /workspace 1000:1000, hello.c 1000:1000\n" +
		" 1 file changed, 1 insertion(+), 1 deletion(-)\n" +
		"from the guest\ninitial\n" +
		"configure: using cc\n" +
		"hello, world\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, " exited code=0 ") {
		t.Fatalf("as the guest user in w2:\n%s\nwant:\n%s<slot> exited code=0 ...", out, want)
	}
	diff := d.mustSh(t, "cat worlds/w2/diff")
	for _, w := range []string{"modified hello.c\n", "added hello\n", "added config.h\n"} {
		if !strings.Contains(diff, w) {
			t.Errorf("w2's diff lacks %q:\n%s", w, diff)
		}
	}
	d.mustSh(t, "echo apply > worlds/w2/ctl")
	if b, err := os.ReadFile(filepath.Join(lower, "hello.c")); err != nil || !strings.Contains(string(b), `GREETING ", world"`) {
		t.Errorf("the lower's hello.c after w2's apply = %q, %v", b, err)
	}
	out = asUser("g1", "cd /workspace && git log --format=%s && git fsck --no-dangling && git status --short && echo sound")
	if !strings.HasPrefix(out, "from the guest\ninitial\nsound\n") || !strings.Contains(out, " exited code=0 ") {
		t.Errorf("the repository after w2's apply, seen from g1 (w1):\n%s\nwant both commits, fsck quiet, a clean status", out)
	}
}
