package cgroup

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// loadSample reads a recorded layout from testdata: a free-text header,
// then sections "-- mountinfo --" (/proc/self/mountinfo) and, for each
// cgroup2 mount, "-- <mount point>/cgroup.controllers --". It returns the
// mount table with the cgroup2 controllers filled in, as Detect would.
func loadSample(t *testing.T, name string) []Mount {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "-- "); ok && strings.HasSuffix(h, " --") {
			cur = strings.TrimSuffix(h, " --")
			continue
		}
		if cur != "" {
			sections[cur] += line + "\n"
		}
	}
	mounts, err := ParseMountinfo(strings.NewReader(sections["mountinfo"]))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for i, m := range mounts {
		if m.Version == 2 {
			c, ok := sections[m.Point+"/cgroup.controllers"]
			if !ok {
				t.Fatalf("%s: no recorded %s/cgroup.controllers", name, m.Point)
			}
			mounts[i].Controllers = strings.Fields(c)
		}
	}
	return mounts
}

var hybridV1 = map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu"}

// TestDecideRecorded decides the layouts recorded in testdata.
func TestDecideRecorded(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Layout
	}{
		{"v2-lab.txt", Layout{Mode: V2, V2: "/sys/fs/cgroup"}},
		{"hybrid.txt", Layout{Mode: V1, V1: hybridV1}},
		{"v1.txt", Layout{Mode: V1, V1: hybridV1}},
		{"v1-readonly.txt", Layout{Mode: None, Why: "cgroup2 at /sys/fs/cgroup/unified offers no memory, pids, cpu controller; " +
			"cgroup v1 memory at /sys/fs/cgroup/memory is read-only; cgroup v1 pids at /sys/fs/cgroup/pids is read-only; " +
			"cgroup v1 cpu at /sys/fs/cgroup/cpu is read-only"}},
		{"nocgroup.txt", Layout{Mode: None, Why: "no cgroup file system is mounted"}},
		{"v2-nocontrollers.txt", Layout{Mode: None, Why: "cgroup2 at /sys/fs/cgroup offers no memory, pids, cpu controller; " +
			"no cgroup v1 hierarchy for memory, pids, cpu"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			if got := Decide(loadSample(t, tc.file)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide(%s) = %+v; want %+v", tc.file, got, tc.want)
			}
		})
	}
}

// TestDecide covers layouts not recorded here, built by hand.
func TestDecide(t *testing.T) {
	all := []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}
	v2 := func(point string, ro bool, c ...string) Mount {
		return Mount{Point: point, Root: "/", Version: 2, ReadOnly: ro, Controllers: c}
	}
	v1 := func(point string, ro bool, c ...string) Mount {
		return Mount{Point: point, Root: "/", Version: 1, ReadOnly: ro, Controllers: c}
	}
	for _, tc := range []struct {
		name   string
		mounts []Mount
		want   Layout
	}{
		{"v2 at /sys/fs/cgroup", []Mount{v2("/sys/fs/cgroup", false, all...)},
			Layout{Mode: V2, V2: "/sys/fs/cgroup"}},
		{"hybrid with the controllers left to v2", []Mount{
			v1("/sys/fs/cgroup/systemd", false, "name=systemd"),
			v2("/sys/fs/cgroup/unified", false, all...)},
			Layout{Mode: V2, V2: "/sys/fs/cgroup/unified"}},
		{"v2 preferred over v1", []Mount{
			v1("/sys/fs/cgroup/memory", false, "memory"), v1("/sys/fs/cgroup/pids", false, "pids"),
			v1("/sys/fs/cgroup/cpu", false, "cpu"), v2("/mnt/cg2", false, all...)},
			Layout{Mode: V2, V2: "/mnt/cg2"}},
		{"read-only v2, writable v1", []Mount{
			v2("/sys/fs/cgroup/unified", true, all...),
			v1("/sys/fs/cgroup/memory", false, "memory"), v1("/sys/fs/cgroup/pids", false, "pids"),
			v1("/sys/fs/cgroup/cpu,cpuacct", false, "cpu", "cpuacct")},
			Layout{Mode: V1, V1: map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct"}}},
		{"co-mounted v1 controllers", []Mount{v1("/cg", false, "memory", "pids", "cpu")},
			Layout{Mode: V1, V1: map[string]string{"memory": "/cg", "pids": "/cg", "cpu": "/cg"}}},
		{"first writable v1 mount of a hierarchy", []Mount{
			v1("/ro/memory", true, "memory"), v1("/sys/fs/cgroup/memory", false, "memory"),
			v1("/sys/fs/cgroup/pids", false, "pids"), v1("/sys/fs/cgroup/cpu", false, "cpu")},
			Layout{Mode: V1, V1: map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu"}}},
		{"v2 and v1 each with part", []Mount{
			v2("/sys/fs/cgroup/unified", false, "memory", "pids"),
			v1("/sys/fs/cgroup/cpu", false, "cpu")},
			Layout{Mode: None, Why: "cgroup2 at /sys/fs/cgroup/unified offers no cpu controller; no cgroup v1 hierarchy for memory, pids"}},
		{"v1 without cpu", []Mount{
			v1("/sys/fs/cgroup/memory", false, "memory"), v1("/sys/fs/cgroup/pids", false, "pids")},
			Layout{Mode: None, Why: "no cgroup v1 hierarchy for cpu"}},
		{"nothing", nil, Layout{Mode: None, Why: "no cgroup file system is mounted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.mounts); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
24 23 0:19 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
27 23 0:22 / /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime shared:12 master:3 - cgroup cgroup rw,cpuacct,cpu,clone_children
41 31 0:38 /docker/abc /mnt/cg\0402 rw,relatime - cgroup2 cgroup2 rw,nsdelegate

`
	want := []Mount{
		{Point: "/sys/fs/cgroup/systemd", Root: "/", Version: 1},
		{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Version: 1, ReadOnly: true, Controllers: []string{"cpuacct", "cpu"}},
		{Point: "/mnt/cg 2", Root: "/docker/abc", Version: 2},
	}
	got, err := ParseMountinfo(strings.NewReader(in))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMountinfo = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{
		"41 31 0:38 / /sys/fs/cgroup rw cgroup2 cgroup2 rw", // no separator
		"41 31 0:38 / - cgroup2 cgroup2 rw",                 // too few fields before it
		"41 31 0:38 / /sys/fs/cgroup rw - cgroup2",          // too few after
	} {
		if _, err := ParseMountinfo(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "mountinfo: line 1: malformed") {
			t.Errorf("ParseMountinfo(%q) = _, %v; want a malformed-line error", bad, err)
		}
	}
}

func TestLimitFiles(t *testing.T) {
	lim := Limits{MemBytes: 384 << 20, CPUPercent: 150, Pids: 64}
	for _, tc := range []struct {
		m    Mode
		c    string
		want []limitFile
	}{
		{V2, "memory", []limitFile{{"memory.max", "402653184"}}},
		{V2, "pids", []limitFile{{"pids.max", "64"}}},
		{V2, "cpu", []limitFile{{"cpu.max", "150000 100000"}}},
		{V1, "memory", []limitFile{{"memory.limit_in_bytes", "402653184"}}},
		{V1, "pids", []limitFile{{"pids.max", "64"}}},
		{V1, "cpu", []limitFile{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "150000"}}},
	} {
		if got := limitFiles(tc.m, tc.c, lim); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("limitFiles(%s, %s) = %v; want %v", tc.m, tc.c, got, tc.want)
		}
	}
	for _, c := range Needed {
		for _, m := range []Mode{V1, V2} {
			if len(limitFiles(m, c, lim)) == 0 {
				t.Errorf("limitFiles(%s, %s) is empty", m, c)
			}
		}
	}
}

func TestCreateRejectsBadNames(t *testing.T) {
	l := Layout{Mode: V1, V1: map[string]string{"memory": t.TempDir()}}
	for _, name := range []string{"", "/abs", "../up", "a/../../b", "a/", "./a", "a//b"} {
		if _, err := l.Create(name, Limits{}); err == nil || !strings.Contains(err.Error(), "cgroup: bad name") {
			t.Errorf("Create(%q) = _, %v; want a bad-name error", name, err)
		}
	}
	if _, err := (Layout{Mode: None, Why: "no cgroup file system is mounted"}).Create("x", Limits{}); err == nil ||
		!strings.Contains(err.Error(), "no cgroup file system is mounted") {
		t.Errorf("Create on None = _, %v; want the reason", err)
	}
}
