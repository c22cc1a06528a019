package e2b

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"sandfs/ctl/cred"
	"sandfs/fs/client"
)

func TestParseListQueryMetadata(t *testing.T) {
	// As the SDK sends {'k y': 'v&1', owner: 'me'} (e2b-protocol.md §2.4).
	raw := "metadata=k%252520y%3Dv%2525261%26owner%3Dme&state=running,paused&order=asc&limit=5&nextToken=10"
	q, _ := url.ParseQuery(raw)
	lq, err := parseListQuery(q, false)
	if err != nil {
		t.Fatal(err)
	}
	if lq.metadata["k y"] != "v&1" || lq.metadata["owner"] != "me" || len(lq.metadata) != 2 {
		t.Errorf("metadata = %q", lq.metadata)
	}
	if !lq.states["running"] || !lq.states["paused"] || !lq.asc || lq.limit != 5 || lq.start != 10 {
		t.Errorf("query = %+v", lq)
	}
	l := listedSandbox{State: "running", Metadata: map[string]string{"k y": "v&1", "owner": "me"}}
	if !lq.match(l) {
		t.Error("match = false for a sandbox with both pairs")
	}
	l.Metadata["owner"] = "you"
	if lq.match(l) {
		t.Error("match = true with owner=you")
	}
	if _, err := parseListQuery(url.Values{"limit": {"-1"}}, false); err == nil {
		t.Error("limit=-1 accepted")
	}
	lq, _ = parseListQuery(url.Values{"state": {"paused"}}, true)
	if lq.states["paused"] || !lq.states["running"] {
		t.Errorf("v1 states = %v, want running only", lq.states)
	}
}

func TestEndOf(t *testing.T) {
	for _, c := range []struct {
		line   string
		code   int32
		exited bool
		status string
		err    bool
	}{
		{"3 exited code=0 pid=812", 0, true, "exit status 0", false},
		{"3 exited code=7 pid=812", 7, true, "exit status 7", true},
		{"3 killed signal=9 pid=812", -1, false, "signal: killed", true},
		{"3 killed signal=15 pid=812", -1, false, "signal: terminated", true},
	} {
		ev := endOf(c.line)
		if ev.ExitCode != c.code || ev.Exited != c.exited || ev.Status != c.status || (ev.Error != nil) != c.err {
			t.Errorf("endOf(%q) = %+v", c.line, ev)
		}
	}
}

func TestStartMsgsAndConfig(t *testing.T) {
	cwd, tag, off := "/tmp", "web", false
	rec := &Record{Envs: map[string]string{"A": "sandbox", "B": "b"}}
	req := &startRequest{Process: processConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo 'x y'\necho z"},
		Envs: map[string]string{"A": "req"}, Cwd: &cwd}, Tag: &tag, Stdin: &off}
	m := startMsgs(rec, "user", req)
	want := []string{"user user", "cwd /tmp", "env A=sandbox", "env B=b", "env A=req", "stdin off", "tag web"}
	if !slices.Equal(m[:len(want)], want) || !strings.HasPrefix(m[len(m)-1], "start /bin/bash -l -c '") {
		t.Fatalf("startMsgs = %q", m)
	}
	// The agent's config is these lines; parseConfig reads them back.
	cfg, gotTag := parseConfig(strings.Join(m, "\n") + "\n")
	if cfg.Cmd != "/bin/bash" || !slices.Equal(cfg.Args, req.Process.Args) || *cfg.Cwd != "/tmp" ||
		cfg.Envs["A"] != "req" || gotTag == nil || *gotTag != "web" {
		t.Errorf("parseConfig = %+v tag %v", cfg, gotTag)
	}
}

func TestParseStatus(t *testing.T) {
	st := parseStatus("box1 paused template=base mem=1G cpus=2 world=- created=100 timeout=5m deadline=400 pid=9 limits=none boot=cold")
	if st.ID != "box1" || st.State != "paused" || st.MemMB != 1024 || st.CPUs != 2 ||
		st.Created.Unix() != 100 || st.Deadline.Unix() != 400 {
		t.Errorf("parseStatus = %+v", st)
	}
	if e2bState("dead") != "" || e2bState("running") != "running" {
		t.Error("e2bState")
	}
}

func TestGuestPath(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "/home/user/a.txt", "~/x/../y": "/home/user/y", "/tmp/../etc": "/etc", "~": "/home/user",
	} {
		if got := guestPath(in, "user"); got != want {
			t.Errorf("guestPath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := guestPath("x", "root"); got != "/root/x" {
		t.Errorf("root's guestPath = %q", got)
	}
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	gen := filepath.Join(dir, "key")
	t.Setenv("SANDFS_E2B_KEY", "")
	keys, k, err := LoadKeys("", gen)
	if err != nil || k == "" || len(keys) != 1 {
		t.Fatalf("generated: %v %q %v", keys, k, err)
	}
	if fi, _ := os.Stat(gen); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode().Perm())
	}
	if _, k2, _ := LoadKeys("", gen); k2 != k {
		t.Errorf("second start: key %q, want the same %q", k2, k)
	}
	f := filepath.Join(dir, "keys")
	os.WriteFile(f, []byte("# team\nkey-aaaaaaaaaaaaaaaa 1000:1000\nkey-bbbbbbbbbbbbbbbb 0\n"), 0o600)
	keys, _, err = LoadKeys(f, gen)
	if err != nil || keys["key-aaaaaaaaaaaaaaaa"].UID != 1000 || keys["key-aaaaaaaaaaaaaaaa"].GID != 1000 || keys["key-bbbbbbbbbbbbbbbb"].UID != 0 {
		t.Errorf("keys file: %v %v", keys, err)
	}
	// An owner is explicit: a key without one would act as root unsaid.
	os.WriteFile(f, []byte("key-aaaaaaaaaaaaaaaa 1000\nkey-bbbbbbbbbbbbbbbb\n"), 0o600)
	if _, _, err := LoadKeys(f, gen); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("a key without an owner: %v, want an error for line 2", err)
	}
	os.WriteFile(f, []byte("short\n"), 0o600)
	if _, _, err := LoadKeys(f, gen); err == nil {
		t.Error("a short key accepted")
	}
}

func TestRegistrySaved(t *testing.T) {
	p := filepath.Join(t.TempDir(), "e2b.json")
	r := NewRegistry(p)
	r.Put(&Record{ID: "a", Owner: "o1", Token: "t", Started: time.Unix(1, 0)})
	r.Put(&Record{ID: "b", Owner: "o2", Started: time.Unix(2, 0)})
	r2, err := LoadRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Owned("o1"); len(got) != 1 || got[0].ID != "a" || got[0].Token != "t" {
		t.Errorf("Owned(o1) = %v", got)
	}
	r2.Delete("a")
	if r3, _ := LoadRegistry(p); r3.Get("a") != nil || r3.Get("b") == nil {
		t.Error("delete not saved")
	}
	r2.PutSnap("s1", "o2")
	if r3, _ := LoadRegistry(p); r3.SnapOwner("s1") != "o2" {
		t.Error("a snapshot's owner not saved")
	}
	r2.DeleteSnap("s1")
	if r3, _ := LoadRegistry(p); r3.SnapOwner("s1") != "" || r3.Get("b") == nil {
		t.Error("a snapshot's delete not saved")
	}
	// A file from before snapshot owners: a bare list of records.
	os.WriteFile(p, []byte(`[{"id":"old","owner":"o1"}]`), 0o600)
	if r4, err := LoadRegistry(p); err != nil || r4.Get("old") == nil {
		t.Errorf("old registry file: %v", err)
	}
}

// TestRefusals: no key 401; envd traffic for an unknown sandbox 502, a
// wrong access token 401, all before the tree is asked.
func TestRefusals(t *testing.T) {
	dial := func(context.Context, cred.Cred) (*client.Client, error) {
		return nil, errors.New("no tree in this test")
	}
	reg := NewRegistry("")
	reg.Put(&Record{ID: "box", Owner: keyID("key-aaaaaaaaaaaaaaaa"), Token: "tok"})
	s := New(Config{Keys: map[string]cred.Cred{"key-aaaaaaaaaaaaaaaa": {}}, Dial: dial, Registry: reg})
	for _, c := range []struct {
		name    string
		headers map[string]string
		path    string
		want    int
	}{
		{"no key", nil, "/v2/sandboxes", 401},
		{"bad key", map[string]string{"X-API-KEY": "nope"}, "/v2/sandboxes", 401},
		{"other's sandbox", map[string]string{"X-API-KEY": "key-aaaaaaaaaaaaaaaa"}, "/sandboxes/nosuch", 404},
		{"unknown sandbox", map[string]string{"E2b-Sandbox-Id": "nosuch"}, "/health", 502},
		{"bad token", map[string]string{"E2b-Sandbox-Id": "box", "X-Access-Token": "x"}, "/health", 401},
		{"another port", map[string]string{"E2b-Sandbox-Id": "box", "E2b-Sandbox-Port": "8080", "X-Access-Token": "tok"}, "/", 502},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != c.want || !strings.Contains(w.Body.String(), `"code":`) {
			t.Errorf("%s: %d %s, want %d and a JSON code", c.name, w.Code, w.Body, c.want)
		}
	}
}

func TestReadLine(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("a\n"+strings.Repeat("x", 100000)+"\nlast"), 16)
	for _, want := range []int{1, 100000, 4} {
		b, err := readLine(br)
		if err != nil || len(b) != want {
			t.Fatalf("readLine = %d bytes, %v; want %d", len(b), err, want)
		}
	}
	if _, err := readLine(br); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: %v; want EOF", err)
	}
	long := bufio.NewReader(io.MultiReader(strings.NewReader(strings.Repeat("y", maxLine+10)), strings.NewReader("\n")))
	if _, err := readLine(long); err == nil {
		t.Error("a line over maxLine was read")
	}
}

func TestPlainName(t *testing.T) {
	for s, want := range map[string]bool{"snap-1": true, "": false, "..": false, "a/b": false, "../x": false, "A": false, "x y": false} {
		if plainName(s) != want {
			t.Errorf("plainName(%q) = %v", s, !want)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	mi := "MemTotal:        1000 kB\nMemFree:  10 kB\nMemAvailable:     400 kB\nCached:     300 kB\n"
	total, used, cache, err := parseMeminfo([]byte(mi))
	if err != nil || total != 1000<<10 || used != 600<<10 || cache != 300<<10 {
		t.Errorf("parseMeminfo = %d %d %d %v; want 1000, 600, 300 KiB", total, used, cache, err)
	}
	for _, bad := range []string{"", "MemTotal: x kB\n", "MemTotal: 10 kB\nMemAvailable: 20 kB\n", "MemAvailable: 5 kB\n"} {
		if _, _, _, err := parseMeminfo([]byte(bad)); err == nil {
			t.Errorf("parseMeminfo(%q) accepted", bad)
		}
	}
	// user nice system idle iowait irq softirq steal
	s1, err := parseCPU([]byte("cpu  10 0 10 70 10 0 0 0 0 0\ncpu0 1 2 3\n"))
	if err != nil || s1 != (cpuSample{busy: 20, total: 100}) {
		t.Fatalf("parseCPU = %+v, %v", s1, err)
	}
	for _, bad := range []string{"", "intr 1 2 3 4 5\n", "cpu 1 2 x 4\n", "cpu 1 2\n", "cpu 1 2 3 99999999999999999999\n"} {
		if _, err := parseCPU([]byte(bad)); err == nil {
			t.Errorf("parseCPU(%q) accepted", bad)
		}
	}
	s2 := cpuSample{busy: 95, total: 200}
	for _, c := range []struct {
		prev, cur cpuSample
		want      float64
	}{
		{cpuSample{}, s1, 20}, // since boot
		{s1, s2, 75},          // 75 busy of 100
		{s2, s1, 20},          // a guest whose counters went back: since boot
		{s1, s1, 20},          // no time passed: since boot
		{cpuSample{}, cpuSample{}, 0},
	} {
		if got := cpuPct(c.prev, c.cur); got != c.want {
			t.Errorf("cpuPct(%+v, %+v) = %v; want %v", c.prev, c.cur, got, c.want)
		}
	}
}

// countWriter counts writes and their largest size.
type countWriter struct{ n, most int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n++
	c.most = max(c.most, len(p))
	return len(p), nil
}

// TestCopyFullChunks: an upload goes to the tree in writes no larger than
// one 9P write of fs/client's connection (256 KiB msize: 256 KiB - 512
// of payload), so that 1 MiB is 5 round trips to the guest, not 8.
func TestCopyFullChunks(t *testing.T) {
	var cw countWriter
	if err := copyFull(&cw, iotest.OneByteReader(strings.NewReader(strings.Repeat("x", 1<<20)))); err != nil {
		t.Fatal(err)
	}
	if cw.most > 256<<10-512 || cw.n != 5 {
		t.Errorf("1 MiB: %d writes, the largest %d bytes; want 5 of at most %d", cw.n, cw.most, 256<<10-512)
	}
}
