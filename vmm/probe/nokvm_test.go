package probe_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
	"sandfs/vmm/probe"
)

// TestMain doubles as a probe run on a host without /dev/kvm: with
// SANDFS_PROBE_NO_DEV=1 the process (in a mount namespace of its own) puts
// an empty tmpfs over /dev, probes and prints the verdict.
func TestMain(m *testing.M) {
	if os.Getenv("SANDFS_PROBE_NO_DEV") == "1" {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fmt.Println("mount private:", err)
			os.Exit(2)
		}
		if err := unix.Mount("none", "/dev", "tmpfs", 0, ""); err != nil {
			fmt.Println("mount tmpfs on /dev:", err)
			os.Exit(2)
		}
		fmt.Println(probe.Probe())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestProbeOnHostWithoutKVM: the real probe, in a mount namespace where
// /dev holds nothing, says lab because there is no /dev/kvm, whatever this
// host's own /dev/kvm is.
func TestProbeOnHostWithoutKVM(t *testing.T) {
	testenv.NeedRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDFS_PROBE_NO_DEV=1", "SANDFS_FORCE_LAB=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe without /dev: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "lab: this host has no /dev/kvm") {
		t.Fatalf("probe without /dev = %q; want lab, no /dev/kvm", got)
	}
}
