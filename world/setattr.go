package world

import (
	"context"
	"syscall"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// upperOf copies n up (a directory without its entries, a file with its
// data unless data is false) and runs f on an O_PATH descriptor of its
// upper copy.
func (n *node) upperOf(data bool, f func(fd int) error) error {
	w := n.w
	if err := w.writable(); err != nil {
		return err
	}
	n.used.Store(true) // what its lookup saw is no longer what it is
	w.layers.RLock()
	defer w.layers.RUnlock()
	l, err := w.resolve(n.p())
	if err != nil {
		return err
	}
	if l.isDir() {
		w.mu.Lock()
		_, err = w.upperDirs(n.p())
		w.mu.Unlock()
	} else {
		err = w.copyUp(n.p(), data)
	}
	if err != nil {
		return err
	}
	return withAt(w.upper, n.p(), unix.O_PATH, f)
}

// truncate is Truncate (writeas.go): a truncation to 0 copies no data.
func (f *File) truncate(_ context.Context, size int64) error {
	if size < 0 {
		return syscall.EINVAL
	}
	return f.upperOf(size > 0, func(fd int) error { return unix.Truncate(procPath(fd), size) })
}

// setAttr is SetAttr (writeas.go): mode, owner, then times, on the
// upper's copy. A symbolic link has no mode of its own (EOPNOTSUPP) and
// keeps its times.
func (n *node) setAttr(_ context.Context, c sfs.Change) error {
	return n.upperOf(true, func(fd int) error { return sfs.SetAttrFD(fd, c) })
}
