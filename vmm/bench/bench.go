// Package bench is `sandfs vmm bench`: boot-to-init time and memory
// overhead of the sandfs VMM, beside QEMU microvm on the same kernel and
// initramfs. Scaffolding, not product: it drives package vmm from outside
// (Launch), as the daemon does.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"sandfs/test/cpio"
	"sandfs/vmm/boot"
	"sandfs/vmm/testguest"
	"sandfs/vmm/vmmproc"
)

// Exit codes, as the VMM process's (vmm/vmmproc/main.go).
const (
	codeError = 1
	codeUsage = 2
)

// benchMarker is what the benchmark guest's init prints first.
const benchMarker = testguest.Marker

// Initramfs is the benchmark guest: busybox (if busybox is at
// busyboxPath) with an /init script that prints benchMarker and sleeps, or
// else this binary as /init (testguest.Init).
func Initramfs(busyboxPath string) ([]byte, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return testguest.Initramfs()
	}
	var b bytes.Buffer
	a := cpio.NewWriter(&b)
	a.Dir("bin", 0o755)
	a.Dir("dev", 0o755)
	a.CharDev("dev/console", 0o600, 5, 1)
	a.Dir("proc", 0o755)
	a.File("bin/busybox", 0o755, bb)
	a.File("init", 0o755, []byte("#!/bin/busybox sh\n/bin/busybox mount -t proc proc /proc\n"+
		"echo "+benchMarker+" cpus=$(/bin/busybox grep -c ^processor /proc/cpuinfo) uptime=$(/bin/busybox cut -d' ' -f1 /proc/uptime)\n"+
		"exec /bin/busybox sleep 100000\n"))
	if err := a.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Main is `sandfs vmm bench`: boot-to-init time and memory overhead of
// the sandfs VMM, and of QEMU microvm with KVM on the same kernel and
// initramfs when qemu-system-x86_64 is installed, as ratios from one run.
func Main(args []string) int {
	fs := flag.NewFlagSet("vmm bench", flag.ContinueOnError)
	kernel := fs.String("kernel", os.Getenv("SANDFS_KERNEL"), "bzImage (default $SANDFS_KERNEL)")
	n := fs.Int("n", 3, "boots per VMM")
	memMiB := fs.Int("mem", 128, "guest RAM in MiB")
	busybox := fs.String("busybox", "/bin/busybox", "static busybox for the guest (else this binary is /init)")
	qemu := fs.String("qemu", "qemu-system-x86_64", "QEMU binary for the comparison (\"\" to skip)")
	if err := fs.Parse(args); err != nil {
		return codeUsage
	}
	if *kernel == "" {
		fmt.Fprintln(os.Stderr, "vmm bench: no kernel (-kernel or $SANDFS_KERNEL)")
		return codeUsage
	}
	dir, err := os.MkdirTemp("", "sandfs-bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmm bench:", err)
		return codeError
	}
	defer os.RemoveAll(dir)
	initrd, err := Initramfs(*busybox)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmm bench:", err)
		return codeError
	}
	initrdPath := filepath.Join(dir, "initrd")
	if err := os.WriteFile(initrdPath, initrd, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "vmm bench:", err)
		return codeError
	}
	mem := uint64(*memMiB) << 20
	fmt.Printf("kernel %s, initramfs %d KiB, guest %d MiB, 1 vCPU, %d boots each\n", *kernel, len(initrd)>>10, *memMiB, *n)

	qbin := ""
	if *qemu != "" {
		if qbin, err = exec.LookPath(*qemu); err != nil {
			fmt.Printf("qemu: not available here (%v): no comparison\n", err)
			qbin = ""
		}
	}
	// Interleaved, so that a noisy host slows both alike.
	var sBoot, qBoot []time.Duration
	var sPSS, qPSS []int
	for i := 0; i < *n; i++ {
		d, pss, err := benchSandfs(dir, *kernel, initrdPath, mem)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vmm bench: sandfs:", err)
			return codeError
		}
		fmt.Printf("  sandfs vmm   boot-to-init %7.1f ms  PSS beyond guest RAM %6d KiB\n", ms(d), pss)
		sBoot, sPSS = append(sBoot, d), append(sPSS, pss)
		if qbin == "" {
			continue
		}
		d, pss, err = benchQEMU(qbin, *kernel, initrdPath, *memMiB)
		if err != nil {
			fmt.Printf("qemu: %v: no comparison\n", err)
			qbin = ""
			continue
		}
		fmt.Printf("  qemu microvm boot-to-init %7.1f ms  PSS beyond guest RAM %6d KiB\n", ms(d), pss)
		qBoot, qPSS = append(qBoot, d), append(qPSS, pss)
	}
	fmt.Printf("sandfs vmm:   median boot-to-init %.1f ms, median PSS beyond guest RAM %d KiB (%.2f MB)\n",
		ms(median(sBoot)), medianInt(sPSS), float64(medianInt(sPSS))*1024/1e6)
	if len(qBoot) == *n {
		fmt.Printf("qemu microvm: median boot-to-init %.1f ms, median PSS beyond guest RAM %d KiB (%.2f MB)\n",
			ms(median(qBoot)), medianInt(qPSS), float64(medianInt(qPSS))*1024/1e6)
		fmt.Printf("ratio sandfs/qemu: boot-to-init %.2f, PSS beyond guest RAM %.2f\n",
			float64(median(sBoot))/float64(median(qBoot)), float64(medianInt(sPSS))/float64(medianInt(qPSS)))
	}
	return 0
}

func benchSandfs(dir, kernel, initrd string, mem uint64) (time.Duration, int, error) {
	con := filepath.Join(dir, "console")
	os.Remove(con)
	cfg := vmmproc.Config{ID: "bench", Kernel: kernel, Initrd: initrd, Cmdline: "quiet -- vmm guest-init",
		MemBytes: mem, CPUs: 1, Socket: filepath.Join(dir, "vmm.sock"), Console: con}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	p, err := vmmproc.Launch(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	launched := time.Since(start)
	defer p.Stop(ctx)
	for {
		b, _ := os.ReadFile(con)
		if i := strings.Index(string(b), benchMarker); i >= 0 {
			line, _, _ := strings.Cut(string(b[i:]), "\n")
			fmt.Printf("    (launch %.1f ms; guest: %s)\n", ms(launched), strings.TrimSpace(line))
			break
		}
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("no %q on the console: %s", benchMarker, b)
		}
		select {
		case <-p.Done():
			r, err := p.Wait()
			b, _ := os.ReadFile(con)
			return 0, 0, fmt.Errorf("vmm ended (%s, %v) before init; console:\n%s", r, err, b)
		case <-time.After(2 * time.Millisecond):
		}
	}
	d := time.Since(start)
	time.Sleep(200 * time.Millisecond) // let the process settle
	pss, err := pssBeyond(p.Pid(), mem)
	return d, pss, err
}

func benchQEMU(qemu, kernel, initrd string, memMiB int) (time.Duration, int, error) {
	cmd := exec.Command(qemu, "-M", "microvm,x-option-roms=off,rtc=off,acpi=off", "-accel", "kvm",
		"-cpu", "host", "-smp", "1", "-m", strconv.Itoa(memMiB), "-nodefaults", "-no-user-config",
		"-nographic", "-no-reboot", "-serial", "stdio", "-kernel", kernel, "-initrd", initrd,
		"-append", boot.BaseCmdline+" quiet -- vmm guest-init")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), benchMarker) {
				found <- true
				break
			}
		}
		found <- false
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			return 0, 0, fmt.Errorf("qemu ended without %q", benchMarker)
		}
	case <-time.After(2 * time.Minute):
		return 0, 0, fmt.Errorf("qemu: no %q after 2 minutes", benchMarker)
	}
	d := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	pss, err := pssBeyond(cmd.Process.Pid, uint64(memMiB)<<20)
	return d, pss, err
}

// pssBeyond is the process's PSS in KiB minus the PSS of its guest-RAM
// mapping (the largest mapping of at least memBytes).
func pssBeyond(pid int, memBytes uint64) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total, guest := 0, 0
	var cur uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			var lo, hi uint64
			fmt.Sscanf(fields[0], "%x-%x", &lo, &hi)
			cur = hi - lo
			continue
		}
		if fields[0] == "Pss:" && len(fields) >= 2 {
			v, _ := strconv.Atoi(fields[1])
			total += v
			if cur >= memBytes && v > guest {
				guest = v
			}
		}
	}
	return total - guest, sc.Err()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func medianInt(v []int) int {
	s := append([]int(nil), v...)
	sort.Ints(s)
	return s[len(s)/2]
}
