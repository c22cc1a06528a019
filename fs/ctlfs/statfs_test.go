package ctlfs_test

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuestStatFS: statfs of a sandbox's fs/ is the guest's file
// system (the agent's root), as the agent says, not the tree's own.
func TestGuestStatFS(t *testing.T) {
	e := newGuestEnv(t, false)
	a := e.newSandbox(t, "t")
	c := e.client(t)
	got, err := c.StatFS("sandboxes/t/fs")
	if err != nil {
		t.Fatal(err)
	}
	var want unix.Statfs_t
	if err := unix.Statfs(a.root, &want); err != nil {
		t.Fatal(err)
	}
	if got.BlockSize != uint32(want.Bsize) || got.Blocks != want.Blocks {
		t.Errorf("StatFS(fs) = bsize %d blocks %d; want the agent root's, bsize %d blocks %d",
			got.BlockSize, got.Blocks, want.Bsize, want.Blocks)
	}
	if _, err := c.StatFS("sandboxes/t/fs/nosuch"); err == nil {
		t.Error("StatFS of a missing path succeeded")
	}
}
