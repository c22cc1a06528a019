package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sandfs/test/testenv"
)

// TestGroupOnHost makes a limited group in the layout this host has
// (cgroup1 on a hybrid or v1 host, cgroup2 in the lab), puts a child
// process in it the way vmmproc.Launch does, checks /proc/<pid>/cgroup and the
// limit files, and removes it. A host without usable controllers fails
// with CI=true or in the lab.
func TestGroupOnHost(t *testing.T) {
	testenv.NeedRoot(t)
	l, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Need(t, l.Mode != None, "usable cgroup controllers: "+l.Why)
	t.Logf("layout: %s", l)

	name := fmt.Sprintf("sandfs-test/g%d", os.Getpid())
	lim := Limits{MemBytes: 64 << 20, CPUPercent: 50, Pids: 16}
	g, err := l.Create(name, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Remove()
		for _, d := range g.Dirs {
			os.Remove(filepath.Dir(d)) // sandfs-test, if no other run uses it
		}
	})
	if want := map[Mode]int{V2: 1, V1: 3}[l.Mode]; len(g.Dirs) != want {
		t.Errorf("Dirs = %v; want %d on %s", g.Dirs, want, l.Mode)
	}

	cmd := exec.Command("sleep", "60")
	if fd := g.FD(); fd >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	} else if l.Mode == V2 {
		t.Fatal("cgroup2 group has no FD")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	g.Close()
	pid := cmd.Process.Pid
	if l.Mode == V1 {
		if err := g.Add(pid); err != nil {
			t.Fatal(err)
		}
	}

	// /proc/<pid>/cgroup: "hierarchy-ID:controller-list:cgroup-path"
	// (cgroups(7)); v2 is the line with ID 0 and no controllers.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{} // controller ("" for v2) → in the group
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasSuffix(f[2], "/"+name) {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			in[c] = true
		}
	}
	want := []string{""}
	if l.Mode == V1 {
		want = Needed
	}
	for _, c := range want {
		if !in[c] {
			t.Errorf("/proc/%d/cgroup has no %q line for %s:\n%s", pid, c, name, b)
		}
	}

	checkLimits := func(lim Limits) {
		t.Helper()
		for i, c := range Needed {
			dir := g.Dirs[0]
			if l.Mode == V1 {
				dir = filepath.Join(l.V1[c], name)
				if !slices.Contains(g.Dirs, dir) {
					t.Errorf("Dirs = %v; want %s (%d)", g.Dirs, dir, i)
				}
			}
			for _, f := range limitFiles(l.Mode, c, lim) {
				got, err := os.ReadFile(filepath.Join(dir, f.name))
				if err != nil || strings.TrimSpace(string(got)) != f.value {
					t.Errorf("%s/%s = %q, %v; want %q", dir, f.name, got, err, f.value)
				}
			}
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(pid)) {
				t.Errorf("%s/cgroup.procs = %q; want pid %d", dir, procs, pid)
			}
		}
	}
	checkLimits(lim)
	// New limits for the group and its member, in place (a spare VMM's
	// group, given its sandbox's).
	lim2 := Limits{MemBytes: 96 << 20, CPUPercent: 150, Pids: 24}
	if err := g.SetLimits(lim2); err != nil {
		t.Fatal(err)
	}
	checkLimits(lim2)
	if ex, err := l.Existing(name); err != nil {
		t.Fatal(err)
	} else if err := ex.SetLimits(lim); err != nil {
		t.Fatalf("SetLimits of the group found by name: %v", err)
	}
	checkLimits(lim)

	if err := g.Remove(); err == nil || !strings.Contains(err.Error(), "device or resource busy") {
		t.Errorf("Remove with a live member = %v; want EBUSY", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := g.Remove(); err != nil {
		t.Errorf("Remove after the member was reaped: %v", err)
	}
	for _, d := range g.Dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", d, err)
		}
	}
}

// TestExisting: the group of a name is the directories Create makes for
// it, one per hierarchy (co-mounted controllers share one); bad names
// and a layout without controllers are refused.
func TestExisting(t *testing.T) {
	l := Layout{Mode: V1, V1: map[string]string{"memory": "/c/mc", "pids": "/c/pids", "cpu": "/c/mc"}}
	g, err := l.Existing("sandfs/t-1")
	if err != nil || g.Mode != V1 || !slices.Equal(g.Dirs, []string{"/c/mc/sandfs/t-1", "/c/pids/sandfs/t-1"}) || g.FD() != -1 {
		t.Errorf("v1 Existing = %+v, %v", g, err)
	}
	g, err = Layout{Mode: V2, V2: "/c2"}.Existing("sandfs/t-1")
	if err != nil || !slices.Equal(g.Dirs, []string{"/c2/sandfs/t-1"}) {
		t.Errorf("v2 Existing = %+v, %v", g, err)
	}
	for _, name := range []string{"../x", "/abs", "a//b", ""} {
		if _, err := l.Existing(name); err == nil {
			t.Errorf("Existing(%q) accepted", name)
		}
	}
	if _, err := (Layout{Mode: None, Why: "none"}).Existing("x"); err == nil {
		t.Error("Existing without controllers accepted")
	}
}
