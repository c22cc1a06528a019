package ctl

// Pause to disk of VMMRuntime's machines (DiskPauser, DiskResumer): the
// VMM writes a delta of its memory into its own store (work/snapshots/,
// beside the chain it is over) and makes its disk layer durable in
// place (syncdisks); the daemon then kills it. Resume restores that
// image over the same layer, in the same run directory.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

var (
	_ DiskPauser  = (*vmmMachine)(nil)
	_ DiskResumer = (*VMMRuntime)(nil)
)

// pauseMark begins the name of a pause image in a machine's store: no
// listed snapshot (ValidName) and no template snapshot (a cache key
// starts with its template's name) can have it.
const pauseMark = "_pause-"

// SaveToDisk implements DiskPauser: the image is "<id> <host> <image>
// <root>", the memory snapshot's id in the work store, the host name of
// the machine's kernel command line, the identity of its disk's base
// image (both needed to restore it: vmmMachine.Snapshot's Boot) and the
// snapshot the memory is a delta over ("-": it is full). An earlier
// pause image the machine was resumed from is folded in (the delta is
// over the snapshot that image was over), so that it is superseded and
// goes at the next resume (dropPauses). A machine with no snapshot under
// its pause images (a cold boot) writes its first one full; resumed from
// it, that image is the root of its next ones (ResumeFromDisk), so they
// fold over it too and its store keeps at most three images (the root,
// the one it runs from, the new one). Only a machine resumed from an
// image of a record without the root field writes one over that image,
// with no <root> field, and nothing is dropped.
func (m *vmmMachine) SaveToDisk(ctx context.Context) (string, error) {
	if m.work == "" || m.host == "" || m.image == "" || strings.ContainsAny(m.host+m.image, " \n") {
		return "", Errorf(syscall.ENOTSUP, "the machine's work directory, boot host name or disk image is unknown")
	}
	id := pauseMark + strconv.FormatInt(time.Now().UnixNano(), 10)
	store := filepath.Join(m.work, workSnaps)
	root, over := m.foldRoot(), ""
	if root != "" {
		over = filepath.Join(store, root)
	} else if m.last != "" {
		over = filepath.Join(store, m.last) // a pause image with no root
	}
	// One request: the memory delta, not re-arming the dirty pages' tracking
	// (the machine ends next), and the disk layer's sync.
	if err := m.takeMem(ctx, filepath.Join(store, id), &over, m.p.SaveToDisk); err != nil {
		return "", err
	}
	img := id + " " + m.host + " " + m.image
	switch {
	case over == "":
		img += " -"
	case root != "":
		img += " " + root
	}
	m.root = root
	return img, nil
}

// foldRoot is the snapshot a delta of m's memory is best taken over: its
// last one, or when that is a pause image, the one the image is over
// ("" none).
func (m *vmmMachine) foldRoot() string {
	if strings.HasPrefix(m.last, pauseMark) {
		return m.root
	}
	return m.last
}

// Discard implements DiskPauser: SIGKILL, no orderly stop (the stop
// verb's wait for the daemon's session to close and the process's own
// exit cost ~100 ms in the lab; nothing is left to write), and no wait
// for the process's end (vmmproc.Process.Abort).
func (m *vmmMachine) Discard() { m.p.Abort() }

// parseImage splits SaveToDisk's image name. root is "" when the image
// has no root field (older records too: then nothing is dropped) or
// "-" (a full image); a pause image root is a cold-booted machine's
// first, full image.
func parseImage(img string) (id, host, image, root string, err error) {
	f := strings.Fields(img)
	if len(f) == 3 {
		f = append(f, "")
	}
	if len(f) != 4 || !strings.HasPrefix(f[0], pauseMark) || strings.ContainsAny(f[0]+f[3], "/") || f[3] == f[0] || f[3] == pauseMark {
		return "", "", "", "", Errorf(syscall.EINVAL, "bad pause image %s", msg.Cite(img))
	}
	return f[0], f[1], f[2], f[3], nil
}

// ResumeFromDisk implements DiskResumer: the VMM restores the image from
// its work store (the chain it is over is there too) over the disk layer
// the paused machine left, then the guest gets the wall clock, entropy
// and its host name (refreshGuest).
func (r *VMMRuntime) ResumeFromDisk(ctx context.Context, s Spec, img string) (Machine, error) {
	id, host, image, root, err := parseImage(img)
	if err != nil {
		return nil, &ImageIntactError{err}
	}
	cfg, err := r.config(s, host)
	if err != nil {
		return nil, &ImageIntactError{err}
	}
	if now, err := imageID(cfg.Disks[0].Path); err != nil || now != image {
		return nil, &ImageIntactError{Errorf(syscall.ESTALE, "template %s changed since the sandbox was paused (its disk layer is over the old image)", msg.Cite(s.Template))}
	}
	if err := prepareRunDir(s.Dir, cfg.Jail.UID); err != nil {
		return nil, &ImageIntactError{err}
	}
	if root != "" {
		// The record names this image (persisted before the resume):
		// the ones it superseded go.
		if err := dropPauses(WorkDir(s), id, root); err != nil {
			r.Log.Warn("resume from disk: earlier pause images stay", "id", s.ID, "err", err)
		}
	}
	start := time.Now()
	vm, err := r.launch(ctx, s.ID, s.Config, cfg, filepath.Join(WorkDir(s), workSnaps, id))
	if err != nil {
		return nil, err
	}
	vm.last = id
	switch root {
	case "-":
		// A full image is the root of the next ones (a cold boot's:
		// they fold over it rather than chain).
		vm.root = id
	default:
		vm.root = root
		r.adoptBase(vm, root)
	}
	via, err := vm.refresh(ctx, s.ID)
	if err != nil {
		vm.p.Kill()
		return nil, Errorf(Errno(err), "after resume from disk: %s", errText(err))
	}
	r.Log.Info("resumed from disk: agent serving", "id", s.ID, "image", id, "after", time.Since(start).Round(time.Millisecond), "via", via)
	return vm, nil
}

// dropPauses removes every pause image in the work store of work but
// the one a resume starts from and the one it is over (root: a full
// pause image, or a snapshot).
func dropPauses(work, keep, root string) error {
	ents, err := os.ReadDir(filepath.Join(work, workSnaps))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, pauseMark) && n != keep && n != root {
			if err := removeBeneath(work, filepath.Join(workSnaps, n)); err != nil {
				return err
			}
		}
	}
	return nil
}
