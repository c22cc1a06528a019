// Package testguest is the VMM's test and benchmark guest: an initramfs
// whose /init is the running executable (Initramfs), and what that
// executable does as the guest's PID 1 (Init). Test binaries call Init
// from TestMain when they find themselves PID 1 as /init; `sandfs vmm
// guest-init` calls it in the benchmark guest. It does not import package
// vmm, so vmm's own tests can use it.
package testguest

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"

	"sandfs/test/cpio"
	"sandfs/test/testenv"
)

// Initramfs is an uncompressed initramfs whose /init is the running
// executable (a static Go binary), with /dev/console, /proc, /sys and /tmp.
func Initramfs() ([]byte, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("self initramfs: %w", err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		return nil, fmt.Errorf("self initramfs: %w", err)
	}
	var b bytes.Buffer
	a := cpio.NewWriter(&b)
	a.Dir("dev", 0o755)
	a.CharDev("dev/console", 0o600, 5, 1)
	a.Dir("proc", 0o755)
	a.Dir("sys", 0o755)
	a.Dir("tmp", 0o755)
	a.File("init", 0o755, bin)
	if err := a.Close(); err != nil {
		return nil, fmt.Errorf("self initramfs: %w", err)
	}
	return b.Bytes(), nil
}

var self struct {
	once sync.Once
	data []byte
	err  error
}

// Initrd is Initramfs for a test, built once per test binary; a failure
// fails the test.
func Initrd(t testing.TB) []byte {
	t.Helper()
	self.once.Do(func() { self.data, self.err = Initramfs() })
	if self.err != nil {
		t.Fatal(self.err)
	}
	return self.data
}

// Kernel is the path of the guest kernel (testenv.Kernel), which must
// exist (testenv.NeedFile: built by `make kernel`).
func Kernel(t testing.TB) string {
	t.Helper()
	p := testenv.Kernel()
	testenv.NeedFile(t, p, "make kernel")
	return p
}
