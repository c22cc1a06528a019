// Package testenv is how a sandfs test decides whether it can run here.
// There are two kinds of missing thing, and they are treated differently:
//
//   - Guests. Whether this host runs sandfs guests natively is the host
//     probe's verdict (vmm/probe), never whether /dev/kvm opens. Where the
//     verdict is "lab", NeedGuests skips: that is the one documented
//     hand-off, because `make test` runs the same package again inside the
//     lab (test/lab-packages). With CI=true a package that is not listed
//     there fails instead, since its test would run nowhere.
//   - Everything else a test needs (root, /dev/fuse, a built kernel, a tap).
//     Need skips on a developer's machine but fails with CI=true and inside
//     the lab (SANDFS_LAB=1): a green CI means the test ran.
package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sandfs/vmm/probe"
)

// InCI reports whether the tests run under CI (CI=true), where no test may
// skip except for the lab hand-off.
func InCI() bool { return os.Getenv("CI") == "true" }

// InLab reports whether the tests run inside the lab (SANDFS_LAB=1), where
// every feature must be present.
func InLab() bool { return os.Getenv("SANDFS_LAB") == "1" }

// NeedGuests skips the test unless the host probe says guests run natively
// here; inside the lab a "lab" verdict is a failure.
func NeedGuests(t testing.TB) {
	t.Helper()
	v := probe.Cached()
	HandOff(t, v.Native, "guests: "+v.Reason)
}

// HandOff skips a test that needs something only the lab (or a host that
// runs guests natively) has, such as a 9P-capable kernel or a booted
// template; ok says whether it is here. Inside the lab a missing feature
// fails; with CI=true the calling package must be one the lab stage runs.
func HandOff(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InLab() {
		t.Fatalf("SANDFS_LAB=1 but %s", why)
	}
	if InCI() {
		if err := listedForLab(); err != nil {
			t.Fatalf("%s, and this test would run nowhere: %v", why, err)
		}
	}
	t.Skipf("handed to the lab stage of make test (test/lab-packages): %s", why)
}

// Need skips the test when a requirement other than guests is missing, on a
// developer's machine only: with CI=true or inside the lab it fails.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() || InLab() {
		t.Fatalf("missing here (CI=%s SANDFS_LAB=%s): %s", os.Getenv("CI"), os.Getenv("SANDFS_LAB"), why)
	}
	t.Skipf("missing here: %s (CI=true fails instead of skipping)", why)
}

// NeedRoot is Need(uid 0).
func NeedRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "needs root")
}

// NeedFile is Need(path exists), with what builds it in the message.
func NeedFile(t testing.TB, path, builtBy string) {
	t.Helper()
	_, err := os.Stat(path)
	Need(t, err == nil, fmt.Sprintf("%v (%s)", err, builtBy))
}

// listedForLab checks that the current package (the test's working
// directory) is matched by a line of test/lab-packages.
func listedForLab() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, wd)
	if err != nil {
		return err
	}
	list := filepath.Join(root, "test", "lab-packages")
	f, err := os.Open(list)
	if err != nil {
		return err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		if matchPackage(strings.TrimSpace(line), rel) {
			return nil
		}
	}
	return fmt.Errorf("package ./%s is not listed in test/lab-packages", filepath.ToSlash(rel))
}

// matchPackage reports whether a test/lab-packages line ("./vmm",
// "./vmm/...") names the package at rel ("vmm/kvm").
func matchPackage(line, rel string) bool {
	if line == "" {
		return false
	}
	p := strings.TrimPrefix(line, "./")
	rel = filepath.ToSlash(rel)
	if p == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(p, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == p
}

// RepoRoot walks up from the working directory to the directory holding
// go.mod.
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		d = up
	}
}

// NeedFUSE needs root and a /dev/fuse that opens: what a FUSE mount takes.
func NeedFUSE(t testing.TB) {
	t.Helper()
	NeedRoot(t)
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err == nil {
		f.Close()
	}
	Need(t, err == nil, fmt.Sprintf("FUSE: %v", err))
}

// Built is a build output the tests use: the path in the environment
// variable env when set (the lab sets SANDFS_KERNEL and SANDFS_TEMPLATES
// to its own checkout's), else rel under the checkout. It does not check
// that the file exists: NeedFile does.
func Built(env, rel string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	root, err := RepoRoot()
	if err != nil {
		return rel
	}
	return filepath.Join(root, rel)
}

// Kernel is the guest kernel, build/vmlinuz (make kernel).
func Kernel() string { return Built("SANDFS_KERNEL", "build/vmlinuz") }

// Templates is the template directory, build/templates (make template).
func Templates() string { return Built("SANDFS_TEMPLATES", "build/templates") }
