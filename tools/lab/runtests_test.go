package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runTests runs run-tests.sh as make test-unit runs it on the host, on a
// manifest of one "binary" (script, a bash script printing what a Go test
// binary prints) in package dir pkg under dir, with env added; it returns
// the output and the exit code.
func runTests(t *testing.T, dir, script string, env ...string) (string, int) {
	t.Helper()
	return runManifest(t, dir, script, "fake.test pkg", env...)
}

// runManifest is runTests with the manifest's one line given.
func runManifest(t *testing.T, dir, script, line string, env ...string) (string, int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "fake.test"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "manifest")
	if err := os.WriteFile(manifest, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "run-tests.sh", manifest)
	cmd.Env = append(append(os.Environ(), "SANDFS_TEST_ROOT="+dir, "SANDFS_TEST_STAGE=host",
		"SANDFS_TEST_DIGEST="+filepath.Join(dir, "digest"), "LAB_KALLSYMS=/dev/null"), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestRunTestsRerun: run-tests.sh runs a binary's failed test again
// only while its output shows a lab fault, at most twice, passes the
// binary if a rerun passes, and keeps every other failure; a test whose
// last rerun showed a fault too is named on a "lab fault, final:" line
// (test-lab.sh runs it in a new lab boot). The "binary" fails its first
// fails runs, printing msg.
func TestRunTestsRerun(t *testing.T) {
	for _, tc := range []struct {
		name, msg   string
		fails, runs int
		rc          int
		want        string
	}{
		{"reset", `why="guest shut down (reset)"`, 1, 2, 0, "(host, TestA passed on rerun after a lab fault)"},
		{"vmm reset", `msg="vcpu: triple fault, the guest resets" vcpu=0`, 1, 2, 0, "passed on rerun"},
		{"two resets", `why="guest shut down (reset)"`, 2, 3, 0, "passed on rerun 2"},
		{"nested guest's per-CPU slip", `        [    0.768204] BUG: kernel NULL pointer dereference, address: 0000000000000398`, 1, 2, 0, "wrong per-CPU base"},
		{"a dump off the per-CPU base", `            gs: cpl=0 base=0x0 kernel_gs_base=0xffff88800f800000 cr2=0x0 cr3=0x1 per-CPU base slipped: the kernel's base 0x0, its per-CPU area 0xffff88800f800000`, 1, 2, 0, "off its guest's own state"},
		{"a dump with a foreign CR3", `            root: cpl=0 cr3=0x18841b000 CR3 outside guest RAM: not the guest state`, 1, 2, 0, "a wrong per-CPU base or paging root"},
		{"a dump on the per-CPU base", `            gs: cpl=0 base=0xffff88800f800000 kernel_gs_base=0x0 cr2=0x0 cr3=0x1 per-cpu=0xffff88800f800000 ok`, 1, 1, 1, "FAIL\tsandfs/pkg\t"},
		{"its lab crashed", `[  107.533745] traps: PANIC: double fault, error_code: 0x0`, 1, 2, 0, "its lab's kernel crashed"},
		{"its lab reset", `        sandfs lab: guest exited without reporting a status: qemu exited; last console output:`, 1, 2, 0, "its lab's QEMU exited"},
		{"three resets", `why="guest shut down (reset)"`, 3, 3, 1, "\nlab fault, final: fake.test pkg TestA\n"},
		{"other failure", `exec: exit status 1`, 1, 1, 1, "FAIL\tsandfs/pkg\t"},
	} {
		dir := t.TempDir()
		count := filepath.Join(dir, "runs")
		out, rc := runTests(t, dir, "#!/bin/bash\n"+
			"echo '=== RUN   TestA'\n"+
			"n=$(cat "+count+" 2>/dev/null || echo 0); echo $((n + 1)) > "+count+"\n"+
			"if [ $n -ge "+strconv.Itoa(tc.fails)+" ]; then echo '--- PASS: TestA (0.00s)'; echo PASS; exit 0; fi\n"+
			"echo '    x_test.go:1: "+strings.ReplaceAll(tc.msg, "'", "")+"'\n"+
			"echo '--- FAIL: TestA (1.00s)'; echo FAIL; exit 1\n")
		runs := strings.Count(out, "=== RUN   TestA")
		if rc != tc.rc || !strings.Contains(out, tc.want) || runs != tc.runs {
			t.Errorf("%s: exit %d, %d runs; want exit %d, %d runs and %q in:\n%s", tc.name, rc, runs, tc.rc, tc.runs, tc.want, out)
		}
		if final := strings.Contains(out, "lab fault, final:"); final != (tc.name == "three resets") {
			t.Errorf("%s: a \"lab fault, final:\" line: %v; want it only after three faulted runs:\n%s", tc.name, final, out)
		}
	}
}

// TestRunTestsOnly: a manifest line's third field names the tests to
// run (test-lab.sh's line for a new boot after lab faults).
func TestRunTestsOnly(t *testing.T) {
	script := "#!/bin/bash\necho \"args: $*\"; echo '=== RUN   TestB'; echo '--- PASS: TestB (0.00s)'; echo PASS\n"
	out, rc := runManifest(t, t.TempDir(), script, "fake.test pkg TestB|TestC")
	if rc != 0 || !strings.Contains(out, " -test.run ^(TestB|TestC)$\n") || !strings.Contains(out, "ok  \tsandfs/pkg\t") {
		t.Errorf("run-tests.sh: exit %d; want the binary run with -test.run ^(TestB|TestC)$ and passed:\n%s", rc, out)
	}
}

// TestRunTestsWatchdog: a test binary that goes quiet for longer than
// SANDFS_LAB_WATCH gets every user task's state and kernel stack written
// to the console (SANDFS_LAB_CONSOLE), itself among them, and nothing of
// it in the output, whose silence test-lab.sh times.
func TestRunTestsWatchdog(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("reading tasks' kernel stacks needs root (the lab and CI run tests as root)")
	}
	dir := t.TempDir()
	console := filepath.Join(dir, "console")
	// Quiet until the dump is written whole (up to a minute: on a busy
	// host the dump of every process takes seconds).
	out, rc := runTests(t, dir, "#!/bin/bash\necho '=== RUN   TestQuiet'\n"+
		"for i in $(seq 600); do grep -q 'end of the dump' "+console+" 2>/dev/null && break; sleep 0.1; done\n"+
		"echo '--- PASS: TestQuiet (5.00s)'; echo PASS\n", "SANDFS_LAB_WATCH=2", "SANDFS_LAB_CONSOLE="+console)
	if rc != 0 || !strings.Contains(out, "ok  \tsandfs/pkg\t") {
		t.Fatalf("run-tests.sh: exit %d\n%s", rc, out)
	}
	if strings.Contains(out, "lab watchdog") {
		t.Errorf("the watchdog wrote to the output:\n%s", out)
	}
	c, err := os.ReadFile(console)
	if err != nil {
		t.Fatalf("no console dump: %v", err)
	}
	dump := string(c)
	for _, want := range []string{"has had no new line for ", "fake.test -test.v", "lab watchdog:   task ", " state=S (sleeping) wchan=", "lab watchdog: end of the dump"} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump has no %q:\n%.3000s", want, dump)
		}
	}
	if n := strings.Count(dump, "has had no new line"); n != 1 {
		t.Errorf("%d dumps for one quiet spell; want 1", n)
	}
}
