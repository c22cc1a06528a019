package guestlab

import (
	"path/filepath"
	"strings"
	"testing"

	"sandfs/vmm/uds"
)

// TestLongID: a sandbox whose sockets' paths are longer than a
// sockaddr_un holds (the longest name, 63 bytes, in a test's state
// directory) starts from the template's snapshot, its agent answers, and
// its world, served on "<vsock socket>_565", mounts at /workspace; a
// snapshot and a sandbox restored from it work the same (package uds;
// the VMM names its sockets relative to their directory).
func TestLongID(t *testing.T) {
	need(t)
	d := startDaemon(t)
	id := strings.Repeat("l", 63)
	if p := filepath.Join(d.dir, "st/run", id, "vsock/vsock.sock_565"); len(p) <= uds.MaxPath {
		t.Fatalf("%s is %d bytes: a sockaddr_un holds it", p, len(p))
	}
	lower := newLower(t, map[string]string{"a.txt": "alpha\n"})
	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'new "+id+" template=base world=w' > ctl")
	d.waitAgent(t, id)
	if got := d.mustSh(t, "echo 'cat /workspace/a.txt; hostname' > sandboxes/"+id+"/exec; cat sandboxes/"+id+"/exec"); got != "alpha\n"+id+"\n" {
		t.Errorf("in the guest: %q, want alpha and its host name", got)
	}
	clone := strings.Repeat("k", 63)
	d.mustSh(t, "echo 'snapshot s1' > sandboxes/"+id+"/ctl; echo 'new "+clone+" from=s1' > ctl")
	d.waitAgent(t, clone)
	if got := d.mustSh(t, "echo 'cat /workspace/a.txt' > sandboxes/"+clone+"/exec; cat sandboxes/"+clone+"/exec"); got != "alpha\n" {
		t.Errorf("in the sandbox restored from s1: %q", got)
	}
}
