package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl"
	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
	"sandfs/fs/client"
	"sandfs/fs/ctlfs"
	"sandfs/fs/ninep"
)

// The tests here drive the adapter against a real tree (package ctl
// behind fs/ctlfs, served by fs/ninep in process) whose runtime is a
// fake: machines start, snapshot and restore at once and run nothing.

// fakeRuntime starts fake machines at once; its one template is base.
type fakeRuntime struct{}

func (fakeRuntime) Start(_ context.Context, sp ctl.Spec) (ctl.Machine, error) {
	if sp.Template != "base" {
		return nil, msg.Errorf(syscall.ENOENT, "no template %q", sp.Template)
	}
	return newFakeMachine(), nil
}

// Restore implements ctl.SnapshotRestorer.
func (fakeRuntime) Restore(context.Context, ctl.Spec, ctl.SnapshotRef) (ctl.Machine, error) {
	return newFakeMachine(), nil
}

type fakeMachine struct {
	done chan struct{}
	once sync.Once
}

func newFakeMachine() *fakeMachine { return &fakeMachine{done: make(chan struct{})} }

func (m *fakeMachine) Pause(context.Context) error  { return nil }
func (m *fakeMachine) Resume(context.Context) error { return nil }
func (m *fakeMachine) Stop(context.Context) error {
	m.once.Do(func() { close(m.done) })
	return nil
}
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Err() error            { return nil }

// Snapshot implements ctl.Snapshotter: a full snapshot with no files.
func (m *fakeMachine) Snapshot(context.Context, string, string) (ctl.SnapshotStats, error) {
	return ctl.SnapshotStats{DataBytes: 4096}, nil
}

// Two keys of the tests; both act as root in the tree.
const (
	keyA = "key-aaaaaaaaaaaaaaaa"
	keyB = "key-bbbbbbbbbbbbbbbb"
)

// treeEnv is an adapter over a real tree.
type treeEnv struct {
	t   *testing.T
	srv *ninep.Server
	s   *Server
}

func newTreeEnv(t *testing.T, dial func(*ninep.Server) Dialer) *treeEnv {
	p, err := ctl.Open(t.TempDir(), fakeRuntime{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv := ninep.NewServer(ctlfs.New(p, nil).Root(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if dial == nil {
		dial = func(srv *ninep.Server) Dialer { return PipeDialer(ctx, srv) }
	}
	s := New(Config{Keys: map[string]cred.Cred{keyA: {}, keyB: {}}, Dial: dial(srv)})
	t.Cleanup(s.Close)
	return &treeEnv{t: t, srv: srv, s: s}
}

// do sends one REST request as key and returns its status and body.
func (e *treeEnv) do(key, method, path, body string) (int, string) {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("X-API-KEY", key)
	w := httptest.NewRecorder()
	e.s.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

// create makes a sandbox as key from template (a template or snapshot
// name) and returns its id.
func (e *treeEnv) create(key, template string) string {
	e.t.Helper()
	code, body := e.do(key, "POST", "/v2/sandboxes", `{"templateID":"`+template+`"}`)
	var sb sandboxJSON
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &sb) != nil {
		e.t.Fatalf("create %s as %s: %d %s", template, key, code, body)
	}
	return sb.SandboxID
}

// snapIDs is the snapshot ids GET /snapshots answers key.
func (e *treeEnv) snapIDs(key string) []string {
	e.t.Helper()
	code, body := e.do(key, "GET", "/snapshots", "")
	var infos []snapshotInfo
	if code != http.StatusOK || json.Unmarshal([]byte(body), &infos) != nil {
		e.t.Fatalf("GET /snapshots as %s: %d %s", key, code, body)
	}
	var ids []string
	for _, in := range infos {
		ids = append(ids, in.SnapshotID)
	}
	return ids
}

// TestSnapshotsScopedByKey: a key lists, deletes and creates from only
// the snapshots it took, though both keys act as root in the tree.
func TestSnapshotsScopedByKey(t *testing.T) {
	e := newTreeEnv(t, nil)
	a := e.create(keyA, "base")
	code, body := e.do(keyA, "POST", "/sandboxes/"+a+"/snapshots", `{"name":"snap-a"}`)
	if code != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	code, body = e.do(keyA, "POST", "/sandboxes/"+a+"/fork", `{"count":1}`)
	if code != http.StatusCreated {
		t.Fatalf("fork: %d %s", code, body)
	}
	ownA := e.snapIDs(keyA)
	if len(ownA) != 2 || ownA[0] != "snap-a" {
		t.Errorf("key A's snapshots = %q, want snap-a and the fork's", ownA)
	}
	if got := e.snapIDs(keyB); len(got) != 0 {
		t.Errorf("key B lists %q, want none", got)
	}
	if code, body := e.do(keyB, "DELETE", "/templates/snap-a", ""); code != http.StatusNotFound {
		t.Errorf("key B deletes A's snapshot: %d %s, want 404", code, body)
	}
	if code, body := e.do(keyB, "POST", "/v2/sandboxes", `{"templateID":"snap-a"}`); code != http.StatusNotFound {
		t.Errorf("key B creates from A's snapshot: %d %s, want 404", code, body)
	}
	b := e.create(keyA, "snap-a") // its owner may
	if code, _ := e.do(keyB, "GET", "/sandboxes/"+b, ""); code != http.StatusNotFound {
		t.Errorf("key B reads A's sandbox: %d, want 404", code)
	}
	if code, body := e.do(keyA, "DELETE", "/templates/snap-a", ""); code != http.StatusNoContent {
		t.Errorf("key A deletes its snapshot: %d %s", code, body)
	}
}

// interp sends one code-interpreter request (port 49999) for sandbox id.
func (e *treeEnv) interp(id, method, path, body string) (int, string) {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", interpPort)
	req.Header.Set("X-Access-Token", e.s.reg.Get(id).Token)
	w := httptest.NewRecorder()
	e.s.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

// TestContextsBadInputAndCleanup: bad /contexts input answers 400; a
// context that fails to start (this tree's machines have no guest) is
// not kept; a sandbox's contexts go with its kill.
func TestContextsBadInputAndCleanup(t *testing.T) {
	e := newTreeEnv(t, nil)
	id := e.create(keyA, "base")
	for _, body := range []string{`{"language":"r"}`, `{"cwd":`, `{"cwd":"/a\u0000b"}`, `{"cwd":"` + strings.Repeat("x", maxCwd+1) + `"}`} {
		if code, resp := e.interp(id, "POST", "/contexts", body); code != http.StatusBadRequest || !strings.Contains(resp, "contexts:") {
			t.Errorf("POST /contexts %.40s: %d %s, want 400", body, code, resp)
		}
	}
	if code, _ := e.interp(id, "POST", "/contexts", `{"language":"python"}`); code < 500 {
		t.Errorf("a context with no guest to run in: %d, want a 5xx", code)
	}
	if n := len(e.s.ctxs.list(id)); n != 0 {
		t.Errorf("%d contexts kept after a failed start", n)
	}
	cc := &codeContext{ID: "c1", owner: keyID(keyA)}
	if _, err := e.s.ctxs.add(id, cc); err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(keyA, "DELETE", "/sandboxes/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("kill: %d %s", code, body)
	}
	if e.s.ctxs.get(id, "c1") != nil || !cc.removed() || e.s.ctxs.byKey[keyID(keyA)] != 0 {
		t.Error("a killed sandbox's context is kept")
	}
}

// TestContextCaps: a sandbox and a key hold at most so many contexts;
// a removed one frees its place.
func TestContextCaps(t *testing.T) {
	var tb interps
	add := func(sb, id, owner string) error {
		_, err := tb.add(sb, &codeContext{ID: id, owner: owner})
		return err
	}
	for i := range maxContextsPerSandbox {
		if err := add("a", fmt.Sprint(i), "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := add("a", "one-more", "k"); !errors.Is(err, syscall.EAGAIN) || httpStatus(err) != http.StatusTooManyRequests {
		t.Errorf("context %d of a sandbox: %v, want EAGAIN (429)", maxContextsPerSandbox+1, err)
	}
	if had, err := tb.add("a", &codeContext{ID: "0", owner: "k"}); err != nil || had == nil {
		t.Errorf("an existing id: %v %v, want it back", had, err)
	}
	n := maxContextsPerSandbox
	for sb := 0; n < maxContextsPerKey; sb++ {
		for i := 0; i < maxContextsPerSandbox && n < maxContextsPerKey; i++ {
			if err := add(fmt.Sprint("b", sb), fmt.Sprint(i), "k"); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if err := add("c", "x", "k"); !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("context %d of a key: %v, want EAGAIN", maxContextsPerKey+1, err)
	}
	if err := add("c", "x", "other-key"); err != nil {
		t.Errorf("another key: %v", err)
	}
	tb.drop("a", "")
	if err := add("c", "y", "k"); err != nil {
		t.Errorf("after a sandbox's contexts were dropped: %v", err)
	}
}

// TestRedial: when the tree's 9P service ends under the adapter (a
// daemon restart), requests answer 503, not 500 or a hang; dials are
// spaced by the backoff; once the tree is back and the backoff passed,
// the next request dials again and works.
func TestRedial(t *testing.T) {
	var mu sync.Mutex
	gen, stop := context.WithCancel(context.Background())
	dials := 0
	dial := func(srv *ninep.Server) Dialer {
		return func(ctx context.Context, who cred.Cred) (*client.Client, error) {
			mu.Lock()
			g := gen
			dials++
			mu.Unlock()
			if g.Err() != nil { // as a daemon's socket with no daemon
				return nil, syscall.ECONNREFUSED
			}
			return PipeDialer(g, srv)(ctx, who)
		}
	}
	e := newTreeEnv(t, dial)
	id := e.create(keyA, "base")
	now := time.Now()
	e.s.now = func() time.Time { return now }
	stop() // the daemon's service ends: its connections close
	// ... when the server's goroutine sees the cancel: wait for that, or
	// the first request may still be served on the old connection.
	e.s.mu.Lock()
	shared := e.s.clients[keyA]
	e.s.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := shared.StatAttr(""); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shared connection still answers 10 s after its server's end")
		}
	}
	for i, want := range []string{"unreachable", "unreachable", "next dial in"} {
		code, body := e.do(keyA, "GET", "/v2/sandboxes", "")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
			t.Errorf("request %d with the tree gone: %d %s, want 503 %q", i, code, body, want)
		}
	}
	mu.Lock()
	gen, stop = context.WithCancel(context.Background()) // the daemon is back
	before := dials
	mu.Unlock()
	t.Cleanup(stop)
	if code, _ := e.do(keyA, "GET", "/v2/sandboxes", ""); code != http.StatusServiceUnavailable || dials != before {
		t.Errorf("within the backoff: %d after %d dials, want 503 and no dial", code, dials-before)
	}
	now = now.Add(maxBackoff)
	if code, body := e.do(keyA, "GET", "/v2/sandboxes", ""); code != http.StatusOK || !strings.Contains(body, id) {
		t.Errorf("after the backoff: %d %s, want 200 listing %s", code, body, id)
	}
	if len(e.s.down) != 0 {
		t.Errorf("backoff kept after a good dial: %v", e.s.down)
	}
}

// TestSecondsVerbs: .../timeout and .../refreshes take one field of
// seconds and set the sandbox's timeout; a bad body answers 400.
func TestSecondsVerbs(t *testing.T) {
	e := newTreeEnv(t, nil)
	id := e.create(keyA, "base")
	for _, c := range []struct {
		path, body string
		code       int
		timeout    string // in status afterwards, "" not checked
	}{
		{"timeout", `{"timeout": 77}`, http.StatusNoContent, "timeout=1m17s"},
		{"timeout", `{"timeout": -1}`, http.StatusBadRequest, ""},
		{"timeout", `{"timeout": "x"}`, http.StatusBadRequest, ""},
		{"refreshes", `{}`, http.StatusNoContent, "timeout=1m"},
		{"refreshes", `{"duration": 90}`, http.StatusNoContent, "timeout=1m30s"},
		{"refreshes", `{"duration": -5}`, http.StatusBadRequest, ""},
	} {
		code, body := e.do(keyA, "POST", "/sandboxes/"+id+"/"+c.path, c.body)
		if code != c.code || (code == http.StatusBadRequest && !strings.Contains(body, c.path+": want")) {
			t.Errorf("%s %s: %d %s, want %d", c.path, c.body, code, body, c.code)
		}
		if c.timeout == "" {
			continue
		}
		st, err := e.s.clients[keyA].ReadFile("sandboxes/" + id + "/status")
		if err != nil || !strings.Contains(string(st), " "+c.timeout+" ") {
			t.Errorf("%s %s: status %q, want %s", c.path, c.body, st, c.timeout)
		}
	}
}
