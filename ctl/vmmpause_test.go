package ctl

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestParseImage: SaveToDisk's image names, with and without the root
// field (records of before it), and bad ones.
func TestParseImage(t *testing.T) {
	for _, tc := range []struct{ img, id, root string }{
		{"_pause-1 a base-1", "_pause-1", ""},
		{"_pause-1 a base-1 s1", "_pause-1", "s1"},
		{"_pause-1 a base-1 -", "_pause-1", "-"},
		{"_pause-1 a base-1 _base-128m1c-0123456789abcdef", "_pause-1", "_base-128m1c-0123456789abcdef"},
		{"_pause-2 a base-1 _pause-1", "_pause-2", "_pause-1"}, // over a cold boot's first image
	} {
		id, host, image, root, err := parseImage(tc.img)
		if err != nil || id != tc.id || host != "a" || image != "base-1" || root != tc.root {
			t.Errorf("parseImage(%q) = %q %q %q %q, %v", tc.img, id, host, image, root, err)
		}
	}
	for _, bad := range []string{"", "_pause-1 a", "s1 a base-1", "_pause-1 a base-1 _pause-1", "_pause-1 a base-1 _pause-", "_pause-1 a base-1 ../x", "_pause-1 a b c d"} {
		if _, _, _, _, err := parseImage(bad); err == nil {
			t.Errorf("parseImage(%q) accepted", bad)
		}
	}
}

// TestDropPauses: every pause image but the kept one and its root (a
// cold boot's first image) goes; snapshots and the rest of the store
// stay.
func TestDropPauses(t *testing.T) {
	work := t.TempDir()
	store := filepath.Join(work, workSnaps)
	for _, d := range []string{"_pause-1", "_pause-2", "_pause-3", "s1", "_base-x"} {
		if err := os.MkdirAll(filepath.Join(store, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(store, d, "mem"), []byte("m"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := dropPauses(work, "_pause-3", "_pause-1"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(store)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if want := []string{"_base-x", "_pause-1", "_pause-3", "s1"}; !slices.Equal(got, want) {
		t.Errorf("store after dropPauses = %v; want %v", got, want)
	}
}
