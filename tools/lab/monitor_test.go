package lab

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// fakeMonitor answers as QEMU's human monitor does (a banner, the echoed
// command with terminal escapes, its output, the prompt), with out.
func fakeMonitor(t *testing.T, out map[string]string) string {
	sock := filepath.Join(t.TempDir(), "monitor.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("QEMU 7.2.22 monitor - type 'help' for more information\r\n(qemu) "))
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			cmd := strings.TrimSpace(line)
			var echo strings.Builder // the line editor redraws the line at each key
			for i := range cmd {
				echo.WriteString(cmd[:i+1] + "\x1b[K\x1b[D")
			}
			c.Write([]byte(echo.String() + "\r\n" + strings.ReplaceAll(out[cmd], "\n", "\r\n") + "(qemu) "))
		}
	}()
	return sock
}

// TestCPUDump: the dump holds each command's output, and its summary
// each CPU's RIP and whether it was halted.
func TestCPUDump(t *testing.T) {
	sock := fakeMonitor(t, map[string]string{
		"info registers -a": "\nCPU#0\nRAX=0000000000000000 RBX=0000000000000000\nRIP=ffffffff81a0c3e2 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n\nCPU#1\nRIP=ffffffff8104f7aa RFL=00000202 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n",
		"info lapic":        "dumping local APIC state for CPU 0\nLVT0\t 0x00010700 active-hi edge  masked                      ExtINT (vec 0)\nISR\t\t(none)\nIRR\t\t236\n",
	})
	dump := cpuDump(sock, 2)
	for _, want := range []string{"(qemu) info registers -a\n", "RIP=ffffffff81a0c3e2", "(qemu) cpu 1\n", "IRR\t\t236"} {
		if !strings.Contains(dump, want) {
			t.Errorf("dump lacks %q:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "\x1b") || strings.Contains(dump, "\r") || strings.Contains(dump, "iin") {
		t.Errorf("dump keeps terminal escapes, carriage returns or the echo: %q", dump)
	}
	if got, want := cpuSummary(dump), "CPU 0 RIP=ffffffff81a0c3e2 HLT=1; CPU 1 RIP=ffffffff8104f7aa HLT=0"; got != want {
		t.Errorf("summary %q; want %q", got, want)
	}
	if got := cpuDump(filepath.Join(t.TempDir(), "none"), 2); !strings.HasPrefix(got, "(no monitor") {
		t.Errorf("without a monitor: %q", got)
	}
}
