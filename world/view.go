package world

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// UpperView returns the world's upper as a plain read-only directory
// (/worlds/<w>/upper): its entries as they are on disk, whiteouts and
// opaque markers included. It follows the upper through Discard.
func (w *World) UpperView() (sfs.Dir, error) {
	if w.mode == UnsafeRW {
		return nil, fmt.Errorf("an unsafe-rw world has no upper: %w", syscall.ENOENT)
	}
	w.layers.RLock()
	defer w.layers.RUnlock()
	w.mu.Lock()
	if w.view == nil {
		v := &World{mode: UnsafeRW, ro: true, lower: -1, upper: -1, work: -1, meta: newMemMeta(), inflight: map[string]chan struct{}{}, clog: w.clog}
		if err := v.setUpper(w.upper); err != nil {
			w.mu.Unlock()
			return nil, err
		}
		w.view = v
	}
	v := w.view
	w.mu.Unlock()
	return v.Root()
}

// setUpper makes a view show the directory open on fd.
func (v *World) setUpper(fd int) error {
	lower, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	upper, err := unix.Dup(fd)
	if err != nil {
		unix.Close(lower)
		return err
	}
	v.layers.Lock()
	defer v.layers.Unlock()
	for _, old := range []int{v.lower, v.upper} {
		if old >= 0 {
			unix.Close(old)
		}
	}
	v.lower, v.upper = lower, upper
	return nil
}

// Status is the end of the world's status line: how many changes, the
// bytes of the copy-ups under way (done/total), and the cost of the
// copy-ups with data finished since the world was opened (files/bytes,
// the time they streamed).
//
//	changes=3 copying=1048576/4194321 copied=2/8388608 copytime=41ms
func (w *World) Status() (string, error) {
	chs, err := w.Diff()
	if err != nil {
		return "", err
	}
	done, total := w.Copying()
	c := w.Copied()
	return fmt.Sprintf("changes=%d copying=%d/%d copied=%d/%d copytime=%dms",
		len(chs), done, total, c.Files, c.Bytes, c.Time.Milliseconds()), nil
}
