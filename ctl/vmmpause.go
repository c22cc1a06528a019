package ctl

// Pause to disk of VMMRuntime's machines (DiskPauser, DiskResumer): the
// VMM writes a delta of its memory into its own store (work/snapshots/,
// beside the chain it is over) and makes its disk layer durable in
// place (syncdisks); the daemon then kills it. Resume restores that
// image over the same layer, in the same run directory.

import (
	"context"
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

// SaveToDisk implements DiskPauser: the image is "<id> <host> <image>",
// the memory snapshot's id in the work store, the host name of the
// machine's kernel command line and the identity of its disk's base
// image (both needed to restore it: vmmMachine.Snapshot's Boot).
func (m *vmmMachine) SaveToDisk(ctx context.Context) (string, error) {
	if m.work == "" || m.host == "" || m.image == "" || strings.ContainsAny(m.host+m.image, " \n") {
		return "", Errorf(syscall.ENOTSUP, "the machine's work directory, boot host name or disk image is unknown")
	}
	id := pauseMark + strconv.FormatInt(time.Now().UnixNano(), 10)
	store := filepath.Join(m.work, workSnaps)
	over := ""
	if m.last != "" {
		over = filepath.Join(store, m.last)
	}
	if err := m.takeMem(ctx, filepath.Join(store, id), &over); err != nil {
		return "", err
	}
	if err := m.p.SyncDisks(ctx); err != nil {
		return "", err
	}
	return id + " " + m.host + " " + m.image, nil
}

// Discard implements DiskPauser: SIGKILL, no orderly stop (the stop
// verb's wait for the daemon's session to close and the process's own
// exit cost ~100 ms in the lab; nothing is left to write), and no wait
// for the process's end (vmmproc.Process.Abort).
func (m *vmmMachine) Discard() { m.p.Abort() }

// parseImage splits SaveToDisk's image name.
func parseImage(img string) (id, host, image string, err error) {
	f := strings.Fields(img)
	if len(f) != 3 || !strings.HasPrefix(f[0], pauseMark) || strings.ContainsAny(f[0], "/") {
		return "", "", "", Errorf(syscall.EINVAL, "bad pause image %s", msg.Cite(img))
	}
	return f[0], f[1], f[2], nil
}

// ResumeFromDisk implements DiskResumer: the VMM restores the image from
// its work store (the chain it is over is there too) over the disk layer
// the paused machine left, then the guest gets the wall clock, entropy
// and its host name (refreshGuest).
func (r *VMMRuntime) ResumeFromDisk(ctx context.Context, s Spec, img string) (Machine, error) {
	id, host, image, err := parseImage(img)
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
	start := time.Now()
	vm, err := r.launch(ctx, s.ID, s.Net, cfg, filepath.Join(WorkDir(s), workSnaps, id))
	if err != nil {
		return nil, err
	}
	vm.last = id
	if err := vm.refresh(ctx, s.ID); err != nil {
		vm.p.Kill()
		return nil, Errorf(Errno(err), "after resume from disk: %s", errText(err))
	}
	r.Log.Info("resumed from disk: agent serving", "id", s.ID, "image", id, "after", time.Since(start).Round(time.Millisecond))
	return vm, nil
}
