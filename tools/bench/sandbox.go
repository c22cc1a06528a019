package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"sandfs/ctl"
	"sandfs/vmm/vmmproc"
)

// host is where the benchmark runs its VMMs: the kernel, the template's
// disk image and a scratch directory, one subdirectory per VMM.
type host struct {
	kernel, rootfs string
	dir            string
	vmm            string // the VMM binary (vmmproc.FindBinary; "": this one)
	seq            atomic.Int64
}

// newHost is a host for kernel and the template image rootfs, with its
// scratch directory dir, whose VMMs run the daemon's VMM binary.
func newHost(kernel, rootfs, dir string) *host {
	return &host{kernel: kernel, rootfs: rootfs, dir: dir, vmm: vmmproc.FindBinary()}
}

// newDir makes a fresh, short subdirectory of the scratch directory (the
// vsock socket path must stay short).
func (h *host) newDir(prefix string) (string, error) {
	d := filepath.Join(h.dir, prefix+strconv.FormatInt(h.seq.Add(1), 10))
	return d, os.MkdirAll(filepath.Join(d, "work"), 0o700)
}

// config is a VMM of the template as ctl's runtime runs one (disk with a
// copy-on-write layer in work/, vsock, rng, the daemon's VMM binary), not
// jailed, in dir.
func (h *host) config(dir string, mem uint64) vmmproc.Config {
	return vmmproc.Config{
		ID: filepath.Base(dir), Kernel: h.kernel, MemBytes: mem, CPUs: 1,
		Cmdline: "root=/dev/vda rw rootfstype=ext4 init=/sbin/init quiet sandfs.hostname=bench",
		Disks:   []vmmproc.DiskConfig{{Path: h.rootfs, Overlay: filepath.Join(dir, "work", "rootfs.cow"), ID: "rootfs"}},
		Vsock:   &vmmproc.VsockConfig{CID: 3, UDS: filepath.Join(dir, "vsock.sock")},
		RNG:     true,
		Binary:  h.vmm,
		Socket:  filepath.Join(dir, "vmm.sock"),
		Console: filepath.Join(dir, "console"),
		LogFile: filepath.Join(dir, "vmm.log"),
	}
}

// template is a booted template saved as a full snapshot: store/base,
// and the disk layer frozen with it in dir/work.
type template struct {
	dir, store string
	mem        uint64
	boot       time.Duration // process start to the agent serving
	save       time.Duration // pause + full snapshot
}

func (t *template) snap() string { return filepath.Join(t.store, "base") }

// buildTemplate boots the template cold with mem bytes of RAM, waits for
// its agent, pauses it, saves it and stops it (which writes the layer's
// map).
func (h *host) buildTemplate(ctx context.Context, mem uint64) (*template, error) {
	dir, err := h.newDir("t")
	if err != nil {
		return nil, err
	}
	cfg := h.config(dir, mem)
	start := now()
	p, err := vmmproc.Launch(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { p.Kill(); p.Wait() }()
	if err := waitAgent(ctx, cfg.Vsock.UDS, 100*time.Millisecond); err != nil {
		return nil, fmt.Errorf("template boot: %w", err)
	}
	t := &template{dir: dir, store: filepath.Join(dir, "store"), mem: mem, boot: since(start)}
	start = now()
	if err := p.Pause(ctx); err != nil {
		return nil, err
	}
	if err := p.Save(ctx, t.snap()); err != nil {
		return nil, err
	}
	t.save = since(start)
	if err := p.Stop(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// sandbox is one restored VMM.
type sandbox struct {
	dir string
	cfg vmmproc.Config
	p   *vmmproc.Process
}

// phases are the parts of one create from a snapshot.
type phases struct {
	copy    time.Duration // the disk layer copied into the sandbox's work/
	running time.Duration // Launch: process start, restore, vCPUs running
	agent   time.Duration // from running to the agent answering a 9P attach
}

func (p phases) total() time.Duration { return p.copy + p.running + p.agent }

// agentWithin bounds the wait for a restored guest's agent: a restore in
// the lab answers within a second, ten at once within five (a loaded
// lab's slowest rows ran 5 to 10 times slower); a guest the lab's
// emulation stalled never does (a run of 2026-12-05 sat 25 minutes with
// its log ending at the ten restores of the pause rows); past this the
// run fails with what it waited for.
const agentWithin = 2 * time.Minute

// restore creates a sandbox of mem bytes of RAM from snapshot snap, with a
// copy of the disk layer in layerDir/work frozen with it, and waits for
// its agent (at most agentWithin).
func (h *host) restore(ctx context.Context, layerDir string, mem uint64, snap string) (*sandbox, phases, error) {
	var ph phases
	dir, err := h.newDir("r")
	if err != nil {
		return nil, ph, err
	}
	start := now()
	for _, n := range []string{"rootfs.cow", "rootfs.cow.map"} {
		if err := ctl.CopyLayerFile(filepath.Join(dir, "work", n), filepath.Join(layerDir, "work", n), 0); err != nil {
			return nil, ph, err
		}
	}
	ph.copy = since(start)
	s := &sandbox{dir: dir, cfg: h.config(dir, mem)}
	s.cfg.Restore = snap
	start = now()
	if s.p, err = vmmproc.Launch(ctx, s.cfg); err != nil {
		return nil, ph, err
	}
	ph.running = since(start)
	start = now()
	actx, cancel := context.WithTimeout(ctx, agentWithin)
	err = waitAgent(actx, s.cfg.Vsock.UDS, 2*time.Millisecond)
	cancel()
	if err != nil {
		s.close()
		return nil, ph, fmt.Errorf("restore of %s: %w", snap, err)
	}
	ph.agent = since(start)
	return s, ph, nil
}

// close kills the sandbox's VMM and removes its directory.
func (s *sandbox) close() {
	if s.p != nil {
		s.p.Kill()
		s.p.Wait()
	}
	os.RemoveAll(s.dir)
}

// snapshotPhases is where the VMM's snapshot into dir spent its time, as
// its log gives it (snapshot.Timing: the phases="…" of its "vmm:
// snapshot" line), or "" if the log has none within a second: the VMM
// logs the line before it replies, but its log reaches the file through
// a pipe, after the reply (the 256 MiB row of the 2026-12-03 12:01 run
// showed the 64 MiB snapshot's phases).
func (s *sandbox) snapshotPhases(dir string) string {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(s.cfg.LogFile)
		if v := lastPhases(string(b), dir); v != "" || time.Now().After(deadline) {
			return v
		}
	}
}

// lastPhases finds the phases="…" value of the last "vmm: snapshot" line
// for dir of a VMM's log (slog's text format).
func lastPhases(log, dir string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if !strings.Contains(l, `msg="vmm: snapshot"`) || !strings.Contains(l, " dir="+dir+" ") {
			continue
		}
		_, v, ok := strings.Cut(l, ` phases="`)
		if !ok {
			return ""
		}
		v, _, _ = strings.Cut(v, `"`)
		return v
	}
	return ""
}
