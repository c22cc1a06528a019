package vmmproc

import (
	"bytes"
	"context"
	"fmt"
	iofs "io/fs"
	"os"

	"sandfs/fs"
)

// statusFile serves /status, one line in fixed field order (new fields
// go at the end), e.g.
//
//	running cpus=2 mem=268435456 pid=1 tracking=soft-dirty
//
// state: running, paused or ended:<reason>; pid in the process's own PID
// namespace (1 when jailed); tracking: how the next snapshot finds the
// dirty pages, soft-dirty or dirty-log (vmm.Machine.DirtyTracking).
func statusFile(c *control, mode iofs.FileMode) fs.Node {
	return &fs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		fmt.Fprintf(b, "%s cpus=%d mem=%d pid=%d tracking=%s\n", c.state(), c.m.CPUs(), c.m.MemBytes(), os.Getpid(), c.m.DirtyTracking())
		return nil
	}}
}
