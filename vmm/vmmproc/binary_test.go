package vmmproc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBesideExe: the VMM binary is used only when it is an executable
// regular file beside the running one.
func TestBesideExe(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(p string) error // makes BinaryName at p; nil: nothing there
		want bool
	}{
		{"missing", nil, false},
		{"executable", func(p string) error { return os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755) }, true},
		{"not executable", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, false},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, false},
		{"symlink to executable", func(p string) error {
			target := filepath.Join(filepath.Dir(p), "real")
			if err := os.WriteFile(target, nil, 0o755); err != nil {
				return err
			}
			return os.Symlink(target, p)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, BinaryName)
			if tc.make != nil {
				if err := tc.make(p); err != nil {
					t.Fatal(err)
				}
			}
			want := ""
			if tc.want {
				want = p
			}
			if got := besideExe(filepath.Join(dir, "sandfs")); got != want {
				t.Errorf("besideExe(%s/sandfs) = %q; want %q", dir, got, want)
			}
		})
	}
}
