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

// qemuInit is PID 1 of the QEMU guest (no agent there: the lab's kernel
// has no vhost-vsock): it mounts the virtio-9p share with the options
// sandfs-init uses for /workspace (9P2000.L, cache=loose, every write
// synchronous (sync, MS_SYNCHRONOUS), msize 512 KiB,
// which the kernel's virtio transport lowers to its own maximum) and runs
// worlds.py on it; its output goes to the serial console.
const qemuInit = `#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /mnt/w
mount -t 9p -o sync,trans=virtio,version=9p2000.L,msize=524288,access=any,cache=loose w /mnt/w || echo "# sbench-fail mount"
python3 /mnt/w/worlds.py %d %d %d qemu9p=/mnt/w/bench 2>&1 || echo "# sbench-fail python"
sync
exec sleep 3600
`

// worldsQEMU boots the template's kernel and image in QEMU microvm with
// share exported by virtio-9p (-fsdev local, security_model=none: the
// daemon's own files, as sandfs's world serves them) and runs worlds.py
// on it as PID 1, reading its lines from the console.
func (r *run) worldsQEMU(ctx context.Context, bin string, o worldsOpts, share string, res worldsResult) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	dir, err := r.h.newDir("q")
	if err != nil {
		return err
	}
	disk := filepath.Join(dir, "disk.raw")
	r.progress("qemu: disk image with the bench init")
	if err := ctl.CopyLayerFile(disk, r.h.rootfs, 0); err != nil {
		return err
	}
	if err := writeInit(disk, dir, fmt.Sprintf(qemuInit, worldsPasses, o.creates, o.writes)); err != nil {
		return err
	}
	console := filepath.Join(dir, "console")
	args := []string{"-M", "microvm,x-option-roms=off,rtc=off,acpi=off", "-accel", "kvm", "-cpu", "host",
		"-smp", "1", "-m", strconv.Itoa(o.mem), "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-serial", "file:" + console, "-kernel", r.h.kernel,
		"-append", boot.BaseCmdline + " root=/dev/vda rw rootfstype=ext4 init=/sbench-init quiet",
		"-drive", "id=rootfs,file=" + disk + ",format=raw,if=none", "-device", "virtio-blk-device,drive=rootfs",
		"-fsdev", "local,id=w,path=" + share + ",security_model=none", "-device", "virtio-9p-device,fsdev=w,mount_tag=w"}
	r.progress("qemu: boot, measure virtio-9p")
	cmd, ended, err := startQEMU(bin, args, dir)
	if err != nil {
		return err
	}
	defer stopQEMU(cmd, ended)
	seen, last := 0, time.Now()
	for {
		b, _ := os.ReadFile(console)
		lines := strings.Split(string(b), "\n")
		if quiet := time.Since(last); quiet >= stallAfter {
			return &qemuStall{quiet: quiet, console: tail(b)}
		}
		for ; seen < len(lines)-1; seen++ { // the last may be incomplete
			line := strings.TrimSpace(lines[seen])
			if res.add(line) || strings.HasPrefix(line, "# ") {
				r.progress("  %s", line)
				last = time.Now() // progress (not the kernel's messages)
			}
			if strings.HasPrefix(line, "# sbench-fail") {
				return fmt.Errorf("guest: %s; console: %s", line, tail(b))
			}
			if line == "# done" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no end on the console: %s", tail(b))
		case <-ended:
			log, _ := os.ReadFile(filepath.Join(dir, "qemu.log"))
			return fmt.Errorf("qemu ended: %s; console: %s", tail(log), tail(b))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeInit loop-mounts the ext4 image disk on dir/mnt and writes script
// as its /sbench-init.
func writeInit(disk, dir, script string) error {
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-o", "loop", disk, mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("mount %s: %v: %s", disk, err, out)
	}
	werr := os.WriteFile(filepath.Join(mnt, "sbench-init"), []byte(script), 0o755)
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("umount %s: %v: %s", mnt, err, out)
	}
	return werr
}

// qemuStall is QEMU's guest printing nothing for stallAfter: a nested
// guest that stopped (a lab fault; no sandfs code runs in it).
type qemuStall struct {
	quiet   time.Duration
	console string
}

func (e *qemuStall) Error() string {
	return fmt.Sprintf("STALL: QEMU's guest printed nothing for %s; console: %s", e.quiet.Round(time.Second), e.console)
}
