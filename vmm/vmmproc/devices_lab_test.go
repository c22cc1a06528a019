package vmmproc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCloseWithoutStartVsock: the process's devices (here the hybrid
// vsock) are closed by Close on a machine that never started: no
// listening socket or socket file is left behind.
func TestCloseWithoutStartVsock(t *testing.T) {
	m := newTestMachine(t, 1, "forever")
	uds := filepath.Join(t.TempDir(), "v.sock")
	if _, err := addDevices(m, &Config{Vsock: &VsockConfig{CID: 3, UDS: uds}, RNG: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(uds); err != nil {
		t.Fatalf("vsock socket not created: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(uds); !os.IsNotExist(err) {
		t.Errorf("vsock socket %s left after Close: %v", uds, err)
	}
}
