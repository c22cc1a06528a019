package ctl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestIDRangeSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IDRange
		ok   bool
	}{
		{"200000-265535", IDRange{200000, 65536}, true},
		{"1000-1000", IDRange{1000, 1}, true},
		{"1879048192-1879113727", DefaultVMMIDs, true},
		{"0-65535", IDRange{}, false},
		{"999-2000", IDRange{}, false},
		{"5000-4000", IDRange{}, false},
		{"5000", IDRange{}, false},
		{"a-b", IDRange{}, false},
		{"2000-2147483647", IDRange{}, false},
	} {
		var r IDRange
		err := r.Set(tc.in)
		if (err == nil) != tc.ok || tc.ok && r != tc.want {
			t.Errorf("Set(%q) = %+v, %v; want %+v, ok=%v", tc.in, r, err, tc.want, tc.ok)
		}
		if tc.ok && r.String() != tc.in {
			t.Errorf("Set(%q).String() = %q", tc.in, r.String())
		}
	}
}

// TestIDRangeOverlaps: a range that holds a user's or group's id, or
// overlaps subordinate ids, is refused by a jailing runtime.
func TestIDRangeOverlaps(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nsvc:x:300005:100::/:/bin/false\n",
		"group":  "root:x:0:\nbig:x:400007:alice\n",
		"subuid": "alice:100000:65536\n",
		"subgid": "alice:100000:65536\n",
	}
	var paths []string
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	for _, tc := range []struct {
		r    string
		hits []string // substrings of the refusal
	}{
		{"1879048192-1879113727", nil},
		{"300000-300010", []string{"svc:x:300005"}},
		{"400000-400010", []string{"big:x:400007"}},
		{"160000-170000", []string{"subuid: alice:100000:65536", "subgid: alice:100000:65536"}},
		{"165536-170000", nil}, // just past alice's subordinate ids
	} {
		var ids IDRange
		if err := ids.Set(tc.r); err != nil {
			t.Fatal(err)
		}
		r := &VMMRuntime{Jailed: true, Log: discardLog()}
		err := r.useIDs(ids, paths)
		if len(tc.hits) == 0 {
			if err != nil || r.IDs() != ids {
				t.Errorf("useIDs(%s) = %v, IDs %v; want the range", tc.r, err, r.IDs())
			}
			continue
		}
		for _, h := range tc.hits {
			if err == nil || !strings.Contains(err.Error(), h) {
				t.Errorf("useIDs(%s) = %v; want a refusal naming %q", tc.r, err, h)
			}
		}
	}
	// Not jailed: no uids are used, so none are given out.
	r := &VMMRuntime{Log: discardLog()}
	if err := r.useIDs(IDRange{300000, 10}, paths); err != nil || r.IDs().Count != 0 {
		t.Errorf("unjailed runtime: useIDs = %v, IDs %v; want nil, none", err, r.IDs())
	}
}

// idRuntime is a fake runtime whose machines each run as their own uid.
type idRuntime struct {
	*fakeRuntime
	ids IDRange
}

func (r idRuntime) IDs() IDRange { return r.ids }

// TestUIDPerSandbox: each sandbox gets its own uid from the runtime's
// range when it starts, the runtime gets it in Spec.UID, the record keeps
// it, a restarted daemon gives out none of those held by recorded
// sandboxes (dead ones too) nor those owning files of a corrupt record's
// run directory, a full range is ENOSPC, and rm frees the uid.
func TestUIDPerSandbox(t *testing.T) {
	dir := t.TempDir()
	rt := idRuntime{newFakeRuntime(), IDRange{First: 5000, Count: 4}}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a")
	do(t, p, "new b")
	if ua, ub := lookup(t, p, "a").UID(), lookup(t, p, "b").UID(); ua != 5000 || ub != 5001 {
		t.Fatalf("uids of a, b = %d, %d; want 5000, 5001", ua, ub)
	}
	if got := rt.lastSpec().UID; got != 5001 {
		t.Errorf("Spec.UID of b = %d; want 5001", got)
	}
	var rec record
	b, _ := os.ReadFile(filepath.Join(dir, "sandboxes", "b.json"))
	if err := json.Unmarshal(b, &rec); err != nil || rec.UID != 5001 {
		t.Errorf("b's record %s: uid %d (%v); want 5001", b, rec.UID, err)
	}
	do(t, p, "kill a") // dead: keeps its uid until rm
	p.Close()

	// A corrupt record whose run directory holds a file of uid 5002.
	if err := os.WriteFile(filepath.Join(dir, "sandboxes", "c.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	cdir := filepath.Join(dir, "run", "c", "work")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(cdir, 5002, 5002); err != nil {
			t.Fatal(err)
		}
	}

	p2, _ := openPlane(t, dir, rt)
	do(t, p2, "new d")
	want := 5002
	if os.Geteuid() == 0 {
		want = 5003 // 5000 a (dead), 5001 b (dead after the restart), 5002 c's files
	}
	if got := lookup(t, p2, "d").UID(); got != want {
		t.Errorf("uid of d after the restart = %d; want %d", got, want)
	}
	if os.Geteuid() == 0 {
		_, err := p2.Ctl(context.Background(), []byte("new e"))
		wantErr(t, "new e with the range used up", err, syscall.ENOSPC, "no free uid in 5000-5003")
	}
	do(t, p2, "rm a")
	do(t, p2, "new f")
	if got := lookup(t, p2, "f").UID(); got != 5000 {
		t.Errorf("uid of f after rm a = %d; want a's 5000", got)
	}
}

// TestPrepareRunDir lays out a run directory for uid 4242: root's parts
// root's, work/ the uid's; a symlink in place of a part is refused and
// its target left alone; an old run directory owned by the VMM's uid
// (the layout before the jail) is taken back by root.
func TestPrepareRunDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root") // the layout itself is checked in the lab too
	}
	base := t.TempDir()
	dir := filepath.Join(base, "t1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, 65534, 65534) // the old layout
	if err := prepareRunDir(dir, 4242); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		mode os.FileMode
		uid  uint32
	}{".": {0o700, 0}, "root": {0o700, 0}, "vsock": {0o711, 0}, "work": {0o700, 4242}} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || fi.Mode().Perm() != want.mode || st.Uid != want.uid || st.Gid != want.uid {
			t.Errorf("%s: %v uid %d gid %d; want a directory %v of %d", name, fi.Mode(), st.Uid, st.Gid, want.mode, want.uid)
		}
	}

	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(base, "t2")
	os.Mkdir(dir2, 0o700)
	if err := os.Symlink(target, filepath.Join(dir2, "work")); err != nil {
		t.Fatal(err)
	}
	err := prepareRunDir(dir2, 4242)
	wantErr(t, "prepareRunDir with work a symlink", err, syscall.EIO, "not a directory")
	if fi, _ := os.Stat(target); fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("the symlink's target was changed: %v uid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
	}
}

// TestVMMConfigLayout: a jailed runtime's VMM config puts what root
// touches in the run directory, the disk layer in work/, the vsock socket
// in vsock/, jails the VMM on root/ as the sandbox's uid, and refuses a
// sandbox without a uid of its range.
func TestVMMConfigLayout(t *testing.T) {
	tdir := t.TempDir()
	kernel := filepath.Join(tdir, "vmlinuz")
	os.WriteFile(kernel, nil, 0o644)
	os.WriteFile(filepath.Join(tdir, "base.ext4"), nil, 0o644)
	r := &VMMRuntime{KernelPath: kernel, TemplatesDir: tdir, Jailed: true, UIDs: IDRange{7000, 10},
		Log: discardLog()}
	r.Jail.Namespaces, r.Jail.Seccomp = true, true
	run := "/var/lib/sandfs/run/t1"
	cfg, err := r.config(Spec{ID: "t1", Dir: run, UID: 7003}, "t1")
	if err != nil {
		t.Fatal(err)
	}
	j := cfg.Jail
	if j.UID != 7003 || j.GID != 7003 || j.Root != run+"/root" || j.Work != run+"/work" || !j.Namespaces || !j.Seccomp {
		t.Errorf("Jail = %+v", j)
	}
	if cfg.Disks[0].Overlay != run+"/work/rootfs.cow" || cfg.Vsock.UDS != run+"/vsock/vsock.sock" ||
		cfg.Socket != run+"/vmm.sock" || cfg.Console != run+"/console" || cfg.LogFile != run+"/vmm.log" {
		t.Errorf("paths: overlay %s vsock %s socket %s console %s log %s", cfg.Disks[0].Overlay, cfg.Vsock.UDS, cfg.Socket, cfg.Console, cfg.LogFile)
	}
	_, err = r.config(Spec{ID: "t2", Dir: run}, "t2")
	wantErr(t, "config without a uid", err, syscall.EINVAL, "has no uid")
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
