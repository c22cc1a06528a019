package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestServeGuestOpenFiles: a --guest-open-files outside 1-1048576 is a
// usage error (exit 2) before the daemon makes anything: no state
// directory appears.
func TestServeGuestOpenFiles(t *testing.T) {
	for _, v := range []string{"0", "-5", "1048577", "many"} {
		state := filepath.Join(t.TempDir(), "state")
		if rc := runServe([]string{"--state", state, "--mount", "", "--guest-open-files=" + v}); rc != 2 {
			t.Errorf("serve --guest-open-files=%s: exit %d; want 2 (usage)", v, rc)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("serve --guest-open-files=%s made its state directory (%v)", v, err)
		}
	}
}
