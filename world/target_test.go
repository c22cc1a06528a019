package world

import (
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
	"sandfs/fs/fusefs"
	"sandfs/test/testenv"
)

// target is one way to use a world's union: its nodes in-process, or a
// FUSE mount of them with plain system calls.
type target interface {
	read(p string) (string, error)
	write(p, data string) error
	remove(p string) error
	rmdir(p string) error
	mkdir(p string) error
	rename(a, b string) error
	link(a, b string) error
	symlink(text, p string) error
	readlink(p string) (string, error)
	chmod(p string, m iofs.FileMode) error
	list(p string) ([]string, error)
	stat(p string) (sfs.Attr, error)
}

// --- nodes, in-process ---

type nodeTarget struct{ root sfs.Dir }

var bg = context.Background()

func (n nodeTarget) walk(p string) (sfs.Node, error) {
	if p == "." {
		p = ""
	}
	return sfs.Walk(bg, n.root, p)
}

func (n nodeTarget) parent(p string) (sfs.Node, string, error) {
	d, err := n.walk(filepath.Dir(p))
	return d, filepath.Base(p), err
}

func (n nodeTarget) read(p string) (string, error) {
	f, err := n.walk(p)
	if err != nil {
		return "", err
	}
	h, err := sfs.Open(bg, f, sfs.ReadOnly)
	if err != nil {
		return "", err
	}
	defer h.Close()
	var out []byte
	buf := make([]byte, 1<<16)
	for {
		k, err := h.Read(bg, buf, int64(len(out)))
		out = append(out, buf[:k]...)
		if err != nil || k == 0 {
			return string(out), err
		}
	}
}

func (n nodeTarget) write(p, data string) error {
	var h sfs.Handle
	f, err := n.walk(p)
	if errors.Is(err, syscall.ENOENT) {
		d, name, err := n.parent(p)
		if err != nil {
			return err
		}
		_, h, err = d.(sfs.Creator).Create(bg, name, sfs.WriteOnly, 0o644)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else if h, err = sfs.Open(bg, f, sfs.WriteOnly|syscall.O_TRUNC); err != nil {
		return err
	}
	defer h.Close()
	_, err = h.Write(bg, []byte(data), 0)
	return err
}

func (n nodeTarget) rm(p string, dir bool) error {
	d, name, err := n.parent(p)
	if err != nil {
		return err
	}
	return d.(sfs.Remover).Remove(bg, name, dir)
}

func (n nodeTarget) remove(p string) error { return n.rm(p, false) }
func (n nodeTarget) rmdir(p string) error  { return n.rm(p, true) }

func (n nodeTarget) mkdir(p string) error {
	d, name, err := n.parent(p)
	if err != nil {
		return err
	}
	_, err = d.(sfs.Mkdirer).Mkdir(bg, name, iofs.ModeDir|0o755)
	return err
}

func (n nodeTarget) rename(a, b string) error {
	da, na, err := n.parent(a)
	if err != nil {
		return err
	}
	db, nb, err := n.parent(b)
	if err != nil {
		return err
	}
	return da.(sfs.Renamer).Rename(bg, na, db, nb)
}

func (n nodeTarget) link(a, b string) error {
	t, err := n.walk(a)
	if err != nil {
		return err
	}
	d, name, err := n.parent(b)
	if err != nil {
		return err
	}
	return d.(sfs.Linker).Link(bg, t, name)
}

func (n nodeTarget) symlink(text, p string) error {
	d, name, err := n.parent(p)
	if err != nil {
		return err
	}
	_, err = d.(sfs.Symlinker).Symlink(bg, text, name)
	return err
}

func (n nodeTarget) readlink(p string) (string, error) {
	l, err := n.walk(p)
	if err != nil {
		return "", err
	}
	r, ok := l.(sfs.Readlinker)
	if !ok {
		return "", syscall.EINVAL
	}
	return r.Readlink(bg)
}

func (n nodeTarget) chmod(p string, m iofs.FileMode) error {
	f, err := n.walk(p)
	if err != nil {
		return err
	}
	return f.(sfs.Setattrer).SetAttr(bg, sfs.Change{Mode: &m})
}

func (n nodeTarget) list(p string) ([]string, error) {
	d, err := n.walk(p)
	if err != nil {
		return nil, err
	}
	ents, err := d.(sfs.Dir).List(bg)
	names := []string{}
	for _, e := range ents {
		names = append(names, e.Name)
	}
	return names, err
}

func (n nodeTarget) stat(p string) (sfs.Attr, error) {
	f, err := n.walk(p)
	if err != nil {
		return sfs.Attr{}, err
	}
	return f.Stat(bg)
}

// --- plain system calls on a mount ---

type osTarget struct{ dir string }

func (o osTarget) p(p string) string { return filepath.Join(o.dir, p) }

func (o osTarget) read(p string) (string, error) {
	b, err := os.ReadFile(o.p(p))
	return string(b), err
}
func (o osTarget) write(p, data string) error { return os.WriteFile(o.p(p), []byte(data), 0o644) }
func (o osTarget) remove(p string) error      { return unix.Unlink(o.p(p)) }
func (o osTarget) rmdir(p string) error       { return unix.Rmdir(o.p(p)) }
func (o osTarget) mkdir(p string) error       { return unix.Mkdir(o.p(p), 0o755) }
func (o osTarget) rename(a, b string) error   { return unix.Rename(o.p(a), o.p(b)) }
func (o osTarget) link(a, b string) error     { return unix.Link(o.p(a), o.p(b)) }
func (o osTarget) symlink(text, p string) error {
	return unix.Symlink(text, o.p(p))
}
func (o osTarget) readlink(p string) (string, error) { return os.Readlink(o.p(p)) }
func (o osTarget) chmod(p string, m iofs.FileMode) error {
	return unix.Chmod(o.p(p), uint32(m.Perm()))
}
func (o osTarget) list(p string) ([]string, error) {
	ents, err := os.ReadDir(o.p(p))
	names := []string{}
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, err
}
func (o osTarget) stat(p string) (sfs.Attr, error) {
	var st unix.Stat_t
	if err := unix.Lstat(o.p(p), &st); err != nil {
		return sfs.Attr{}, err
	}
	return sfs.Attr{Mode: sfs.ModeOfUnix(st.Mode), Size: st.Size, Ino: st.Ino, Nlink: st.Nlink}, nil
}

// mountFUSE mounts w's union in a temporary directory.
func mountFUSE(t *testing.T, w *World) osTarget {
	testenv.NeedFUSE(t)
	root, err := w.Root()
	if err != nil {
		t.Fatal(err)
	}
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
