package ctlfs_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/fs/ctlfs"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl"
	sfs "sandfs/fs"
	"sandfs/fs/fusefs"
	"sandfs/fs/ninep"
	"sandfs/test/testenv"
)

// target is one way to reach the tree: in-process, a FUSE mount, a 9P
// connection, or `sandfs mount`'s bridge (FUSE over a 9P client).
type target interface {
	open(path string, flags int) (tfile, error)
	readDir(path string) ([]string, error)
	// mountDir is the FUSE mount point, "" if the target has none.
	mountDir() string
}

// tfile is one open file with a file offset.
type tfile interface {
	io.Reader
	io.Writer
	io.Closer
}

// errnoOf returns the errno in err's chain, 0 for nil, EIO otherwise.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var le linux.Errno
	if errors.As(err, &le) {
		return syscall.Errno(le)
	}
	return ctl.Errno(err)
}

// env is a tree over a control plane with a fake runtime.
type env struct {
	plane *ctl.Plane
	tree  *ctlfs.Tree
	dir   string
}

func newEnv(t testing.TB, dir string) *env {
	if dir == "" {
		dir = t.TempDir()
	}
	p, err := ctl.Open(dir, fakeRuntime{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetWorldOpener(ctlfs.OpenWorld)
	return &env{plane: p, tree: ctlfs.New(p, nil), dir: dir}
}

// --- in-process ---

type inproc struct{ root sfs.Dir }

func (in inproc) open(p string, flags int) (tfile, error) {
	ctx := context.Background()
	n, err := sfs.Walk(ctx, in.root, p)
	if err != nil {
		return nil, err
	}
	h, err := sfs.Open(ctx, n, sfs.OpenFlags(flags&syscall.O_ACCMODE))
	if err != nil {
		return nil, err
	}
	return &inprocFile{h: h}, nil
}

func (in inproc) readDir(p string) ([]string, error) {
	n, err := sfs.Walk(context.Background(), in.root, p)
	if err != nil {
		return nil, err
	}
	d, ok := n.(sfs.Dir)
	if !ok {
		return nil, syscall.ENOTDIR
	}
	ents, err := d.List(context.Background())
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	return names, err
}

func (inproc) mountDir() string { return "" }

type inprocFile struct {
	h   sfs.Handle
	off int64
	ctx context.Context
}

func (f *inprocFile) context() context.Context {
	if f.ctx != nil {
		return f.ctx
	}
	return context.Background()
}

func (f *inprocFile) Read(p []byte) (int, error) {
	n, err := f.h.Read(f.context(), p, f.off)
	f.off += int64(n)
	if err == nil && n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}

func (f *inprocFile) Write(p []byte) (int, error) {
	n, err := f.h.Write(f.context(), p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *inprocFile) Close() error { return f.h.Close() }

// --- FUSE (kernel) ---

type osTarget struct{ dir string }

func (o osTarget) open(p string, flags int) (tfile, error) {
	return os.OpenFile(filepath.Join(o.dir, p), flags, 0)
}

func (o osTarget) readDir(p string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(o.dir, p))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

func (o osTarget) mountDir() string { return o.dir }

func mountFUSE(t testing.TB, root sfs.Dir) osTarget {
	testenv.NeedFUSE(t)
	dir := t.TempDir()
	m, err := fusefs.New(dir, root, fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return osTarget{dir}
}

// --- 9P (p9 client library) ---

type p9Target struct{ root p9.File }

// serve9P serves root on a new listener ("unix" or "tcp") and returns its
// address in sandfs's notation.
func serve9P(t testing.TB, root sfs.Dir, network, token string) string {
	var l net.Listener
	var err error
	if network == "unix" {
		l, err = net.Listen("unix", filepath.Join(t.TempDir(), "9p.sock"))
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ninep.NewServer(root, nil).Serve(ctx, l, token)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return network + ":" + l.Addr().String()
}

func dial9P(t testing.TB, addr, aname string) (p9.File, error) {
	network, address, _ := strings.Cut(addr, ":")
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := p9.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	root, err := cl.Attach(aname)
	if err != nil {
		cl.Close()
		return nil, err
	}
	t.Cleanup(func() { cl.Close() })
	return root, nil
}

func split(p string) []string {
	var out []string
	for _, s := range strings.Split(strings.Trim(p, "/"), "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (t p9Target) walk(p string) (p9.File, error) {
	_, f, err := t.root.Walk(split(p))
	return f, err
}

func (t p9Target) open(p string, flags int) (tfile, error) {
	f, err := t.walk(p)
	if err != nil {
		return nil, err
	}
	if _, _, err := f.Open(p9.OpenFlags(flags & syscall.O_ACCMODE)); err != nil {
		f.Close()
		return nil, err
	}
	return &p9File{f: f}, nil
}

func (t p9Target) readDir(p string) ([]string, error) {
	f, err := t.walk(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		return nil, err
	}
	var names []string
	var off uint64
	for {
		ds, err := f.Readdir(off, 100)
		if err != nil {
			return nil, err
		}
		if len(ds) == 0 {
			return names, nil
		}
		for _, d := range ds {
			names = append(names, d.Name)
			off = d.Offset
		}
	}
}

func (p9Target) mountDir() string { return "" }

type p9File struct {
	f   p9.File
	off int64
}

func (f *p9File) Read(p []byte) (int, error) {
	n, err := f.f.ReadAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *p9File) Write(p []byte) (int, error) {
	n, err := f.f.WriteAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *p9File) Close() error { return f.f.Close() }

// --- the bridge: FUSE over the 9P client (sandfs mount) ---

func mountBridge(t testing.TB, addr, token string) osTarget {
	testenv.NeedFUSE(t)
	r, err := ninep.Dial(context.Background(), addr, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return mountFUSE(t, r.Root())
}

// targets returns every target over one env's tree.
func targets(t *testing.T, e *env) map[string]target {
	root := e.tree.Root()
	unix := serve9P(t, root, "unix", "")
	tcp := serve9P(t, root, "tcp", "s3cret")
	p9root, err := dial9P(t, unix, "")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]target{
		"inproc":      inproc{root},
		"fuse":        mountFUSE(t, root),
		"9p":          p9Target{p9root},
		"bridge-unix": mountBridge(t, unix, ""),
		"bridge-tcp":  mountBridge(t, tcp, "s3cret"),
	}
}

// --- helpers over a target ---

func readFile(tg target, p string) (string, error) {
	f, err := tg.open(p, os.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// writeFile opens p for writing, writes msg in one write and closes.
func writeFile(tg target, p, msg string) error {
	f, err := tg.open(p, os.O_WRONLY)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(msg))
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// catInterrupted runs cat on a file of a FUSE mount, sends it SIGINT
// after it has blocked, and reports whether it exited within 5 s.
func catInterrupted(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("cat", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("cat %s returned before the interrupt: %v", path, err)
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("cat %s: still blocked 5s after SIGINT", path)
	}
}

func sameNames(got, want []string) bool {
	got = slices.Clone(got)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	return slices.Equal(got, want)
}
