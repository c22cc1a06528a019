package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sandfs/ctl"
	"sandfs/vmm/boot"
)

// qemuTemplate is the template booted in QEMU microvm (same kernel,
// memory, disk image and command line as the sandfs VMMs; no vsock: the
// lab's kernel has no vhost-vsock) and saved by migration to a file.
type qemuTemplate struct {
	bin, dir, disk, mig string
	mem                 uint64
	boot, save          time.Duration
	migBytes            int64
}

// args is QEMU's command line for t, its QMP socket at qmpSock and its
// serial console in console.
func (t *qemuTemplate) args(kernel, qmpSock, console string) []string {
	return []string{"-M", "microvm,x-option-roms=off,rtc=off,acpi=off", "-accel", "kvm", "-cpu", "host",
		"-smp", "1", "-m", strconv.FormatUint(t.mem>>20, 10), "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-serial", "file:" + console, "-qmp", "unix:" + qmpSock + ",server=on,wait=off",
		"-kernel", kernel,
		"-append", boot.BaseCmdline + " root=/dev/vda rw rootfstype=ext4 init=/sbin/init quiet sandfs.hostname=bench",
		"-drive", "id=rootfs,file=" + t.disk + ",format=raw,if=none",
		"-device", "virtio-blk-device,drive=rootfs",
		"-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-device,rng=rng0"}
}

// qemuBuild boots the template in QEMU with mem bytes of RAM until its
// agent has finished its init duties, stops it and migrates it to a file
// (`migrate exec:cat > file`), timed from `stop` to the migration's end.
func (r *run) qemuBuild(ctx context.Context, bin string, mem uint64) (*qemuTemplate, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	dir, err := r.h.newDir("q")
	if err != nil {
		return nil, err
	}
	// One writable copy of the image for the run (its data extents: in
	// the lab, tens of seconds over 9p), shared by every QEMU template.
	disk := filepath.Join(r.h.dir, "qemu-disk.raw")
	if _, err := os.Stat(disk); err != nil {
		if err := ctl.CopyLayerFile(disk, r.h.rootfs, 0); err != nil {
			return nil, err
		}
	}
	t := &qemuTemplate{bin: bin, dir: dir, disk: disk, mig: filepath.Join(dir, "mig"), mem: mem}
	sock, console := filepath.Join(dir, "qmp.sock"), filepath.Join(dir, "console")
	start := now()
	cmd, ended, err := startQEMU(bin, t.args(r.h.kernel, sock, console), dir)
	if err != nil {
		return nil, err
	}
	defer stopQEMU(cmd, ended)
	if err := waitConsole(ctx, console, "sandfs-init: init done", ended); err != nil {
		return nil, err
	}
	t.boot = since(start)
	time.Sleep(time.Second) // the agent reaches its listen loop (which fails without vsock)
	q, err := dialQMP(ctx, sock)
	if err != nil {
		return nil, err
	}
	defer q.close()
	start = now()
	if _, err := q.do("stop", nil); err != nil {
		return nil, err
	}
	if _, err := q.do("migrate", map[string]string{"uri": "exec:cat > " + t.mig}); err != nil {
		return nil, err
	}
	if err := q.waitMigration(ctx); err != nil {
		return nil, err
	}
	t.save = since(start)
	fi, err := os.Stat(t.mig)
	if err != nil {
		return nil, err
	}
	t.migBytes = fi.Size()
	return t, nil
}

// restore starts QEMU with `-incoming defer`, has it load the migration
// file (`migrate-incoming exec:cat file`), continues it and returns the
// time from the process's start to QEMU's RESUME event (the vCPUs
// running), and the part from migrate-incoming to RESUME. Each restore
// reuses the disk image: it times memory and device state only.
func (t *qemuTemplate) restore(ctx context.Context, kernel string) (total, load time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sock, console := filepath.Join(t.dir, "qmp-r.sock"), filepath.Join(t.dir, "console-r")
	os.Remove(sock)
	start := now()
	cmd, ended, err := startQEMU(t.bin, append(t.args(kernel, sock, console), "-incoming", "defer"), t.dir)
	if err != nil {
		return 0, 0, err
	}
	defer stopQEMU(cmd, ended)
	q, err := dialQMP(ctx, sock)
	if err != nil {
		return 0, 0, err
	}
	defer q.close()
	caps := map[string]any{"capabilities": []map[string]any{{"capability": "events", "state": true}}}
	if _, err := q.do("migrate-set-capabilities", caps); err != nil {
		return 0, 0, err
	}
	loadStart := now()
	if _, err := q.do("migrate-incoming", map[string]string{"uri": "exec:cat " + t.mig}); err != nil {
		return 0, 0, err
	}
	// The source was stopped before it migrated, so QEMU does not start
	// the loaded machine itself: cont, as sandfs's restore resumes.
	e, err := q.waitEvent("MIGRATION completed", "MIGRATION failed")
	if err == nil && e != "MIGRATION completed" {
		err = fmt.Errorf("incoming migration: %s", e)
	}
	if err == nil {
		_, err = q.do("cont", nil)
	}
	if err == nil {
		_, err = q.waitEvent("RESUME")
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(t.dir, "qemu.log"))
		return 0, 0, fmt.Errorf("%w; qemu.log: %s", err, tail(log))
	}
	return since(start), since(loadStart), nil
}

// startQEMU starts bin with args (stderr to dir/qemu.log); ended is closed
// when the process ends.
func startQEMU(bin string, args []string, dir string) (*exec.Cmd, chan struct{}, error) {
	log, err := os.OpenFile(filepath.Join(dir, "qemu.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("qemu: %w", err)
	}
	ended := make(chan struct{})
	go func() { cmd.Wait(); close(ended) }()
	return cmd, ended, nil
}

func stopQEMU(cmd *exec.Cmd, ended chan struct{}) {
	cmd.Process.Kill()
	<-ended
}

// waitConsole polls console until it holds marker, the process ends or
// ctx ends.
func waitConsole(ctx context.Context, console, marker string, ended chan struct{}) error {
	for {
		b, _ := os.ReadFile(console)
		if strings.Contains(string(b), marker) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %q on the console: %s", marker, tail(b))
		case <-ended:
			log, _ := os.ReadFile(filepath.Join(filepath.Dir(console), "qemu.log"))
			return fmt.Errorf("qemu ended before %q: %s; console: %s", marker, tail(log), tail(b))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func tail(b []byte) string { return tailN(b, 2000) }

// tailN is the last n bytes of b.
func tailN(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
