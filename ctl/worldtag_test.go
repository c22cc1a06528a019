package ctl

import (
	"testing"

	"sandfs/guest"
)

// TestWorldTag: the VMM's virtio-9p device and the agent's mount name
// the same tag; with different ones every /workspace would go over vsock.
func TestWorldTag(t *testing.T) {
	if WorldTag != guest.WorkspaceTag {
		t.Fatalf("ctl.WorldTag = %q, guest.WorkspaceTag = %q", WorldTag, guest.WorkspaceTag)
	}
}
