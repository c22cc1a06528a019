package vmm

import (
	"path/filepath"
	"testing"
)

// TestNewMachineFails: a machine that cannot be made is an error, with
// what was made of it released (it panicked: the cleanup ran on the nil
// the failing return had already set).
func TestNewMachineFails(t *testing.T) {
	m, err := NewMachine(MachineConfig{CPUs: 1, MemBytes: 1 << 20, KVMPath: filepath.Join(t.TempDir(), "no-kvm")})
	if err == nil || m != nil {
		t.Fatalf("NewMachine without /dev/kvm = %v, %v; want nil and an error", m, err)
	}
}
