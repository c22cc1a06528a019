package guest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

func TestFSAllBytes(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	data := make([]byte, 256*4)
	for i := range data {
		data[i] = byte(i)
	}
	_, d, err := root.Walk([]string{"fs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Mkdir("sub", 0o750, p9.NoUID, p9.NoGID); err != nil {
		t.Fatal(err)
	}
	_, sub, err := d.Walk([]string{"sub"})
	if err != nil {
		t.Fatal(err)
	}
	_, sub2, _ := sub.Walk(nil) // Create turns the client's fid into the new file
	f, _, _, err := sub2.Create("bytes", p9.ReadWrite, 0o640, p9.NoUID, p9.NoGID)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt(data, 0); err != nil || n != len(data) {
		t.Fatalf("write: %d, %v", n, err)
	}
	f.Close()
	if got := readFile(t, root, "fs/sub/bytes"); got != string(data) {
		t.Errorf("read back %d bytes, differ", len(got))
	}
	onDisk, err := os.ReadFile(filepath.Join(ts.root, "sub/bytes"))
	if !bytes.Equal(onDisk, data) {
		t.Errorf("on disk: %v, %d bytes", err, len(onDisk))
	}
	fi, _ := os.Stat(filepath.Join(ts.root, "sub/bytes"))
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 exactly", fi.Mode())
	}
	fi, _ = os.Stat(filepath.Join(ts.root, "sub"))
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("dir mode %v, want 0750", fi.Mode())
	}

	// getattr, setattr (truncate, chmod), rename, symlink, readlink, readdir, unlink, statfs.
	_, bf, _ := root.Walk([]string{"fs", "sub", "bytes"})
	if _, _, a, err := bf.GetAttr(p9.AttrMaskAll); err != nil || a.Size != uint64(len(data)) {
		t.Errorf("getattr: %v size %d", err, a.Size)
	}
	if err := bf.SetAttr(p9.SetAttrMask{Size: true, Permissions: true}, p9.SetAttr{Size: 10, Permissions: 0o600}); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(filepath.Join(ts.root, "sub/bytes"))
	if fi.Size() != 10 || fi.Mode().Perm() != 0o600 {
		t.Errorf("after setattr: %d %v", fi.Size(), fi.Mode())
	}
	if err := sub.RenameAt("bytes", d, "moved"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Symlink("moved", "link", p9.NoUID, p9.NoGID); err != nil {
		t.Fatal(err)
	}
	_, lf, err := d.Walk([]string{"link"})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := lf.Readlink(); s != "moved" || err != nil {
		t.Errorf("readlink = %q, %v", s, err)
	}
	dd := openFile(t, root, "fs", p9.ReadOnly)
	ents, err := dd.Readdir(0, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]p9.QIDType{}
	for _, e := range ents {
		names[e.Name] = e.Type
	}
	if len(names) != 3 || names["sub"] != p9.TypeDir || names["link"] != p9.TypeSymlink || names["moved"] != p9.TypeRegular {
		t.Errorf("readdir fs/ = %v", names)
	}
	if err := d.UnlinkAt("link", 0); err != nil {
		t.Error(err)
	}
	if err := d.UnlinkAt("sub", unix.AT_REMOVEDIR); err != nil {
		t.Error(err)
	}
	if _, err := d.StatFS(); err != nil {
		t.Error(err)
	}
}

func TestFSConfinement(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	r := ts.root
	os.Mkdir(filepath.Join(r, "d"), 0o755)
	os.WriteFile(filepath.Join(r, "d/f"), []byte("inside"), 0o644)
	os.Symlink("/etc", filepath.Join(r, "abs"))
	os.Symlink("/etc/passwd", filepath.Join(r, "absfile"))
	os.Symlink("../../../../../../..", filepath.Join(r, "d/up"))
	os.Symlink("l2", filepath.Join(r, "l1"))
	os.Symlink("l1", filepath.Join(r, "l2"))
	for _, path := range [][]string{
		{"fs", ".."},
		{"fs", "d", ".."},
		{"fs", "d", "..", ".."},
		{"fs", "abs", "passwd"},
		{"fs", "d", "up", "etc"},
		{"fs", "l1", "x"},
		{"fs", "/etc"},
		{"fs", "d/f"},
		{"fs", "."},
	} {
		if _, f, err := root.Walk(path); err == nil {
			f.Close()
			t.Errorf("walk %q succeeded", path)
		}
	}
	// Symlinks are returned as symlinks, never opened through.
	for _, name := range []string{"abs", "absfile", "l1", "d/up"} {
		f, err := walk(t, root, "fs/"+name)
		if err != nil {
			t.Errorf("walk %s: %v", name, err)
			continue
		}
		if _, _, err := f.Open(p9.ReadOnly); err == nil {
			t.Errorf("open %s (a symlink) succeeded", name)
		}
		if _, _, a, _ := f.GetAttr(p9.AttrMaskAll); a.Mode.FileType() != p9.ModeSymlink {
			t.Errorf("%s: mode %v, want a symlink", name, a.Mode)
		}
		f.Close()
	}
	// Creating through a symlinked directory fails; names with / fail.
	_, a, _ := root.Walk([]string{"fs", "abs"})
	if _, _, _, err := a.Create("x", p9.ReadWrite, 0o644, p9.NoUID, p9.NoGID); err == nil {
		t.Error("create through symlink to /etc succeeded")
	}
	if _, err := a.Mkdir("x", 0o755, p9.NoUID, p9.NoGID); err == nil {
		t.Error("mkdir through symlink succeeded")
	}
	_, d, _ := root.Walk([]string{"fs"})
	for _, name := range []string{"../x", "..", "a/b", ""} {
		if _, _, _, err := d.Create(name, p9.ReadWrite, 0o644, p9.NoUID, p9.NoGID); err == nil {
			t.Errorf("create %q succeeded", name)
		}
	}
	if err := d.RenameAt("d", d, "../escaped"); err == nil {
		t.Error("rename to ../escaped succeeded")
	}
	// A symlink planted at a name cannot redirect a create (O_EXCL|O_NOFOLLOW).
	if _, _, _, err := d.Create("absfile", p9.ReadWrite|p9.OpenFlags(os.O_TRUNC), 0o644, p9.NoUID, p9.NoGID); !errors.Is(err, linux.EEXIST) {
		t.Errorf("create over a symlink: %v, want EEXIST", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(r), "escaped")); err == nil {
		t.Error("something escaped the root")
	}
}

func TestFSOwnersLinksFifo(t *testing.T) {
	needRoot(t)
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	_, d, _ := root.Walk([]string{"fs"})
	_, d2, _ := d.Walk(nil)
	f, _, _, err := d2.Create("owned", p9.WriteOnly, 0o644, 1234, 5678)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(ts.root, "owned"), &st)
	if st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("owner %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
	if _, err := d.Mkdir("dir", 0o700, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	syscall.Stat(filepath.Join(ts.root, "dir"), &st)
	if st.Uid != 1234 || st.Mode&0o777 != 0o700 {
		t.Errorf("dir owner %d mode %o", st.Uid, st.Mode&0o777)
	}
	_, of, _ := d.Walk([]string{"owned"})
	if err := d.Link(of, "hard"); err != nil {
		t.Fatal(err)
	}
	syscall.Stat(filepath.Join(ts.root, "owned"), &st)
	if st.Nlink != 2 {
		t.Errorf("nlink %d after link", st.Nlink)
	}
	if _, err := d.Mknod("fifo", p9.ModeNamedPipe|0o600, 0, 0, p9.NoUID, p9.NoGID); err != nil {
		t.Fatal(err)
	}
	// Opening a FIFO with no writer must not hang the server.
	done := make(chan error, 1)
	go func() {
		_, ff, err := d.Walk([]string{"fifo"})
		if err == nil {
			_, _, err = ff.Open(p9.ReadOnly)
			ff.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("open fifo: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("open of a fifo blocked the server")
	}
	if err := of.SetAttr(p9.SetAttrMask{UID: true, GID: true, MTime: true, MTimeNotSystemTime: true},
		p9.SetAttr{UID: 42, GID: 43, MTimeSeconds: 1000000000}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(ts.root, "owned"))
	syscall.Stat(filepath.Join(ts.root, "owned"), &st)
	if st.Uid != 42 || st.Gid != 43 || fi.ModTime().Unix() != 1000000000 {
		t.Errorf("after setattr: %d:%d mtime %v", st.Uid, st.Gid, fi.ModTime())
	}
}

func TestFSReaddirPaging(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	want := map[string]bool{}
	for i := range 1500 {
		name := fmt.Sprintf("file-with-a-longish-name-%04d", i)
		want[name] = true
		os.WriteFile(filepath.Join(ts.root, name), nil, 0o644)
	}
	d := openFile(t, root, "fs", p9.ReadOnly)
	got := map[string]bool{}
	var off uint64
	calls := 0
	for {
		ents, err := d.Readdir(off, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 0 {
			break
		}
		calls++
		for _, e := range ents {
			if got[e.Name] {
				t.Fatalf("%s listed twice", e.Name)
			}
			got[e.Name] = true
			off = e.Offset
		}
	}
	if len(got) != len(want) || calls < 2 {
		t.Errorf("listed %d of %d names in %d calls", len(got), len(want), calls)
	}
	// O_TRUNC and O_APPEND reach the file.
	os.WriteFile(filepath.Join(ts.root, "t"), []byte("0123456789"), 0o644)
	f := openFile(t, root, "fs/t", p9.WriteOnly|p9.OpenFlags(os.O_TRUNC))
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(ts.root, "t")); len(b) != 0 {
		t.Errorf("O_TRUNC: %q", b)
	}
	os.WriteFile(filepath.Join(ts.root, "a"), []byte("x"), 0o644)
	f = openFile(t, root, "fs/a", p9.WriteOnly|p9.OpenFlags(os.O_APPEND))
	f.WriteAt([]byte("yz"), 0)
	if b, _ := os.ReadFile(filepath.Join(ts.root, "a")); string(b) != "xyz" {
		t.Errorf("O_APPEND: %q", b)
	}
}

// TestFSAttrs: fs/ shows what stat(2) says of a file (owner, mode with
// its special bits, link count, times; its identity, the inode number
// within fs/'s scope, as the QID path: one for both names of a hard
// link, another for another file), and a symbolic link as one, in
// getattr and in a listing alike.
func TestFSAttrs(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	p := filepath.Join(ts.root, "f")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	for _, err := range []error{
		syscall.Chmod(p, 0o4751), // os.Chmod would drop the setuid bit (0o4000 is not os.ModeSetuid)
		os.Link(p, filepath.Join(ts.root, "f2")),
		os.Symlink("f", filepath.Join(ts.root, "l")),
		syscall.Stat(p, &st),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	f, err := walk(t, root, "fs/f")
	if err != nil {
		t.Fatal(err)
	}
	q, _, a, err := f.GetAttr(p9.AttrMaskAll)
	if err != nil {
		t.Fatal(err)
	}
	want := p9.Attr{Mode: p9.ModeRegular | 0o4751, UID: p9.UID(st.Uid), GID: p9.GID(st.Gid), NLink: 2, Size: 5,
		MTimeSeconds: uint64(st.Mtim.Sec), MTimeNanoSeconds: uint64(st.Mtim.Nsec)}
	got := p9.Attr{Mode: a.Mode, UID: a.UID, GID: a.GID, NLink: a.NLink, Size: a.Size,
		MTimeSeconds: a.MTimeSeconds, MTimeNanoSeconds: a.MTimeNanoSeconds}
	if got != want {
		t.Errorf("getattr fs/f = %+v; want %+v", got, want)
	}
	f2, err := walk(t, root, "fs/f2")
	if err != nil {
		t.Fatal(err)
	}
	if q2, _, _, err := f2.GetAttr(p9.AttrMaskAll); err != nil || q2.Path != q.Path {
		t.Errorf("getattr fs/f2 (f's hard link): qid %d, %v; want f's %d", q2.Path, err, q.Path)
	}
	l, err := walk(t, root, "fs/l")
	if err != nil {
		t.Fatal(err)
	}
	if ql, _, a, err := l.GetAttr(p9.AttrMaskAll); err != nil || ql.Type != p9.TypeSymlink || !a.Mode.IsSymlink() || ql.Path == q.Path {
		t.Errorf("getattr fs/l = %v %v, %v; want a symlink, not f's qid path", ql, a.Mode, err)
	}
	d := openFile(t, root, "fs", p9.ReadOnly)
	ents, err := d.Readdir(0, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range ents {
		if e.Name == "f" || e.Name == "l" {
			seen++
		}
		if e.Name == "f" && e.QID.Path != q.Path || e.Name == "l" && e.QID.Type != p9.TypeSymlink {
			t.Errorf("readdir entry %q: qid %+v", e.Name, e.QID)
		}
	}
	if seen != 2 {
		t.Errorf("readdir fs: %d of the entries f and l in %v", seen, ents)
	}
}
