package world

import (
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Kind is what a change does to a path of the lower.
type Kind int

// Kinds of change.
const (
	Added Kind = iota
	Modified
	Deleted
)

func (k Kind) String() string { return [...]string{"added", "modified", "deleted"}[k] }

// Change is one line of a world's diff: a path (relative to the lower)
// the world adds, modifies (content, or for a directory its mode or
// owner) or deletes (with everything under it).
type Change struct {
	Kind Kind
	Path string
	Dir  bool // the world's entry is a directory (Added, Modified)
}

// String is the diff line: "added a/b", the path Go-quoted when it
// holds a blank, a quote or a character that is not printable.
func (c Change) String() string { return c.Kind.String() + " " + quotePath(c.Path) }

func quotePath(p string) string {
	if q := strconv.Quote(p); q[1:len(q)-1] != p || strings.ContainsAny(p, " \t") {
		return q
	}
	return p
}

// Diff returns the world's changes, sorted by path (a deletion before an
// addition of the same path). An unsafe-rw world has none.
func (w *World) Diff() ([]Change, error) {
	if w.mode == UnsafeRW {
		return nil, nil
	}
	w.layers.RLock()
	defer w.layers.RUnlock()
	return w.changes()
}

// changes walks the upper. Called with layers held.
func (w *World) changes() ([]Change, error) {
	var out []Change
	if err := w.walk("", true, &out); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// walk adds the changes under the upper's directory p; lowerDir says
// whether the lower's directory p shows through.
func (w *World) walk(p string, lowerDir bool, out *[]Change) error {
	ents, err := listAt(w.upper, p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name == opaqueName {
			continue
		}
		if strings.HasPrefix(e.Name, whPrefix) {
			*out = append(*out, Change{Kind: Deleted, Path: join(p, e.Name[len(whPrefix):])})
			continue
		}
		cp := join(p, e.Name)
		us, err := lstatAt(w.upper, cp)
		if err != nil {
			return err
		}
		var ls unix.Stat_t
		low := false
		if lowerDir {
			ls, err = lstatAt(w.lower, cp)
			if err != nil && err != unix.ENOENT && err != syscall.ENOTDIR {
				return err
			}
			low = err == nil
		}
		if err := w.walkEntry(cp, &us, &ls, low, out); err != nil {
			return err
		}
	}
	return nil
}

// walkEntry adds the changes of the upper's entry cp (us), over the
// lower's (ls, when low).
func (w *World) walkEntry(cp string, us, ls *unix.Stat_t, low bool, out *[]Change) error {
	add := func(k Kind, dir bool) { *out = append(*out, Change{Kind: k, Path: cp, Dir: dir}) }
	switch {
	case isDir(us) && low && isDir(ls):
		if _, err := lstatAt(w.upper, join(cp, opaqueName)); err == nil {
			add(Deleted, false)
			add(Added, true)
			return w.walk(cp, false, out)
		}
		if attrsDiffer(us, ls) {
			add(Modified, true)
		}
		return w.walk(cp, true, out)
	case isDir(us):
		if low {
			add(Deleted, false)
		}
		add(Added, true)
		return w.walk(cp, false, out)
	case low && isDir(ls):
		add(Deleted, false)
		add(Added, false)
	case low:
		add(Modified, false)
	default:
		add(Added, false)
	}
	return nil
}

// attrsDiffer reports whether a directory's mode or owner changed.
func attrsDiffer(a, b *unix.Stat_t) bool {
	return a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid
}
