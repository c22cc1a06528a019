package vmmproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sandfs/vmm"
)

// guestFailure is what a guest console shows when the kernel fell over.
func guestFailure(console string) string {
	for _, s := range []string{"BUG:", "Oops", "Kernel panic", "general protection", "WARNING:", "RIP: ", "Call Trace"} {
		if strings.Contains(console, s) {
			return s
		}
	}
	return ""
}

// TestBootLoop boots the ticks guest through the process API
// $SANDFS_BOOT_LOOP times (skipped when unset), with $SANDFS_BOOT_LOOP_CPUS
// vCPUs (1), and fails on the first boot whose kernel oopses or that does
// not reach "tick 2", printing its whole console: the soak test for boot
// flakes.
func TestBootLoop(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SANDFS_BOOT_LOOP"))
	if n <= 0 {
		t.Skip("set SANDFS_BOOT_LOOP=<boots>")
	}
	cpus, _ := strconv.Atoi(os.Getenv("SANDFS_BOOT_LOOP_CPUS"))
	if cpus <= 0 {
		cpus = 1
	}
	base := t.TempDir()
	var fails []string
	for i := 0; i < n; i++ {
		dir := filepath.Join(base, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if i > 0 { // one initrd for all
			os.Link(filepath.Join(base, "0", "initrd"), filepath.Join(dir, "initrd"))
		}
		cfg := launchConfig(t, dir, "ticks")
		cfg.CPUs = cpus
		if c := os.Getenv("SANDFS_BOOT_LOOP_CMDLINE"); c != "" {
			cfg.Cmdline += " " + c
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		p, err := Launch(ctx, cfg)
		if err != nil {
			cancel()
			t.Fatalf("boot %d: %v", i, err)
		}
		var out, why string
		for {
			b, _ := os.ReadFile(cfg.Console)
			out = string(b)
			if strings.Contains(out, "tick 2\r\n") {
				break
			}
			if w := guestFailure(out); w != "" {
				time.Sleep(time.Second) // the rest of the oops
				b, _ = os.ReadFile(cfg.Console)
				out, why = string(b), "kernel: "+w
				break
			}
			select {
			case <-p.Done():
				r, err := p.Wait()
				why = fmt.Sprintf("VMM ended: %v %v", r, err)
			default:
			}
			if why != "" {
				break
			}
			if time.Since(start) > 60*time.Second {
				why = "no tick 2 after 60 s"
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		diag := ""
		if why != "" {
			diag = hungGuestDiag(ctx, p, dir)
		}
		p.Stop(ctx)
		p.Kill()
		cancel()
		if why != "" {
			log, _ := os.ReadFile(cfg.LogFile)
			head := string(log)
			if len(head) > 6000 {
				head = head[:6000] + "..."
			}
			t.Errorf("boot %d of %d (%d vCPUs): %s after %v\nconsole:\n%s\nvmm.log:\n%s\n%s", i, n, cpus, why, time.Since(start), out, head, diag)
			fails = append(fails, strconv.Itoa(i))
			continue
		}
		t.Logf("boot %d: tick 2 after %v", i, time.Since(start).Round(time.Millisecond))
		os.Remove(filepath.Join(dir, "console"))
	}
	t.Logf("%d boots, %d failed %v", n, len(fails), fails)
}

// hungGuestDiag pauses and saves a guest that failed to boot and returns
// its vCPU registers and the kernel's printk text found in guest RAM (the
// messages "quiet" kept off the console).
func hungGuestDiag(ctx context.Context, p *Process, dir string) string {
	if err := p.Pause(ctx); err != nil {
		return fmt.Sprintf("diag: pause: %v", err)
	}
	snap := filepath.Join(dir, "diag")
	if err := p.Save(ctx, snap); err != nil {
		return fmt.Sprintf("diag: save: %v", err)
	}
	var b strings.Builder
	if st, err := vmm.LoadState(snap); err == nil {
		for _, c := range st.VCPUs {
			fmt.Fprintf(&b, "vcpu %d: mp_state %d RIP %#x RSP %#x RFLAGS %#x CR0 %#x CR3 %#x CS %#x\n", c.ID, c.MPState,
				c.Regs.RIP, c.Regs.RSP, c.Regs.RFLAGS, c.Sregs.CR0, c.Sregs.CR3, c.Sregs.CS.Selector)
		}
	}
	mem, err := os.ReadFile(filepath.Join(snap, vmm.MemoryFile))
	if err != nil {
		return b.String() + fmt.Sprintf("diag: %v", err)
	}
	// The printk text ring holds the messages as plain text; print the
	// printable runs of the 256 KiB from the banner on.
	i, off := -1, 0
	for {
		j := bytes.Index(mem[off:], []byte("Linux version 6"))
		if j < 0 {
			break
		}
		j += off
		if bytes.Contains(mem[j:min(len(mem), j+16<<10)], []byte("Command line:")) {
			i = j
			break
		}
		off = j + 1
	}
	if i < 0 {
		return b.String() + "diag: no printk text in guest RAM"
	}
	end := min(len(mem), i+256<<10)
	b.WriteString("printk text from guest RAM:\n")
	run := 0
	for _, c := range mem[i:end] {
		if c >= 0x20 && c < 0x7f || c == '\t' {
			b.WriteByte(c)
			run++
		} else if run > 0 {
			if run >= 8 {
				b.WriteByte('\n')
			} else {
				b.WriteString(" ")
			}
			run = 0
		}
	}
	return b.String()
}
