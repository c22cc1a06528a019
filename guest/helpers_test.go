package guest

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"

	"sandfs/fs/ninep"
	"sandfs/test/testenv"
)

func needRoot(t *testing.T) {
	t.Helper()
	testenv.Need(t, os.Geteuid() == 0, "needs root (setuid, chown, ptys as other users)")
}

// testServer is a Server on a temp root, reached through unix socket
// pairs in this process.
type testServer struct {
	t    *testing.T
	srv  *Server
	root string
}

func newTestServer(t *testing.T, opt Options) *testServer {
	t.Helper()
	if opt.Logf == nil {
		opt.Logf = t.Logf
	}
	root := t.TempDir()
	return &testServer{t: t, srv: NewServer(root, opt), root: root}
}

// conn connects a new raw connection to the server; it is closed at
// cleanup.
func (ts *testServer) conn() net.Conn {
	ts.t.Helper()
	sc, cc := unixPair(ts.t)
	served := make(chan struct{})
	go func() {
		defer close(served)
		ts.srv.ServeConn(sc)
	}()
	// The connection's end is the test's: a server still tearing down
	// when the next test runs would log through this test's finished t
	// (the race detector caught testing's output racing that way).
	ts.t.Cleanup(func() {
		cc.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			ts.t.Errorf("the server did not end the connection 10 s after its client closed it")
		}
	})
	return cc
}

// dial connects a new client; it is closed at cleanup.
func (ts *testServer) dial() (*p9.Client, p9.File) {
	ts.t.Helper()
	cc := ts.conn()
	cl, err := ninep.NewClient(cc, 512<<10)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { cl.Close() })
	root, err := cl.Attach("/")
	if err != nil {
		ts.t.Fatal(err)
	}
	return cl, root
}

func walk(t *testing.T, root p9.File, path string) (p9.File, error) {
	t.Helper()
	var names []string
	if path != "" {
		names = strings.Split(path, "/")
	}
	_, f, err := root.Walk(names)
	return f, err
}

func openFile(t *testing.T, root p9.File, path string, mode p9.OpenFlags) p9.File {
	t.Helper()
	f, err := walk(t, root, path)
	if err != nil {
		t.Fatalf("walk %s: %v", path, err)
	}
	if _, _, err := f.Open(mode); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// readAll reads f from offset 0 to EOF (a zero-length read).
func readAll(t *testing.T, f p9.File) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(buf, int64(len(out)))
		out = append(out, buf[:n]...)
		if err != nil || n == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("read: %v", err)
			}
			return out
		}
	}
}

func readFile(t *testing.T, root p9.File, path string) string {
	t.Helper()
	f := openFile(t, root, path, p9.ReadOnly)
	defer f.Close()
	return string(readAll(t, f))
}

func write(f p9.File, s string) error {
	_, err := f.WriteAt([]byte(s), 0)
	return err
}

func mustWrite(t *testing.T, f p9.File, s string) {
	t.Helper()
	if err := write(f, s); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// newProcess opens procs/clone, sends msgs and returns the slot number
// and the clone handle (its ctl).
func newProcess(t *testing.T, root p9.File, msgs ...string) (string, p9.File) {
	t.Helper()
	ctl := openFile(t, root, "procs/clone", p9.ReadWrite)
	n := strings.TrimSpace(string(readAll(t, ctl)))
	for _, m := range msgs {
		mustWrite(t, ctl, m)
	}
	return n, ctl
}

// waitLine reads procs/n/wait with a timeout.
func waitLine(t *testing.T, root p9.File, n string) string {
	t.Helper()
	done := make(chan string, 1)
	go func() { done <- readFile(t, root, "procs/"+n+"/wait") }()
	select {
	case s := <-done:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("procs/%s/wait: timeout", n)
	}
	return ""
}

// fields parses "n state k=v k=v" into a map with "n" and "state".
func fields(line string) map[string]string {
	f := strings.Fields(line)
	m := map[string]string{}
	if len(f) > 0 {
		m["n"] = f[0]
	}
	if len(f) > 1 {
		m["state"] = f[1]
	}
	for _, kv := range f[min(2, len(f)):] {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// unixPair is a connected pair of unix stream sockets.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "sock")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c.(*net.UnixConn)
	}
	return cs[0], cs[1]
}
