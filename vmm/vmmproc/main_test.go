package vmmproc

import (
	"os"
	"strings"
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/vmm"
	"sandfs/vmm/testguest"
)

// TestMain doubles as the guest's /init (the test binary is copied into the
// initramfs) and as the `sandfs vmm` process for Launch tests.
func TestMain(m *testing.M) {
	if os.Getpid() == 1 && os.Args[0] == "/init" {
		testguest.Init()
	}
	if os.Getenv("SANDFS_TEST_SECCOMP") != "" {
		seccompChild()
	}
	if cfg := os.Getenv("SANDFS_TEST_ORPHAN"); cfg != "" {
		orphanParent(cfg)
	}
	if cfg := os.Getenv("SANDFS_TEST_JAIL"); cfg != "" {
		jailChild(cfg)
	}
	if len(os.Args) > 1 && os.Args[1] == "vmm" {
		// A VMM whose sandbox is called attackID plays a compromised
		// one once confined (attack_test.go).
		afterConfine = func(cfg *Config) {
			if cfg.ID == attackID {
				attack(cfg, os.Stderr)
			}
		}
		if os.Getenv(logFloodEnv) != "" {
			logFloodVMM()
		}
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const bootTimeout = 60 * time.Second // nested KVM under TCG is slow

// newTestMachine is a machine booting the test guest in mode (package
// testguest), its console discarded.
func newTestMachine(t *testing.T, cpus int, mode string) *vmm.Machine {
	t.Helper()
	testenv.NeedGuests(t)
	k, err := os.ReadFile(testguest.Kernel(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := vmm.NewMachine(vmm.MachineConfig{
		MemBytes: 256 << 20, CPUs: cpus, Kernel: k, Initrd: testguest.Initrd(t),
		Cmdline: "quiet " + testguest.Mode + "=" + mode,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func countTicks(s string) int { return strings.Count(s, "tick ") }
