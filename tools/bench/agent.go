package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/msg"
	"sandfs/fs/ninep"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// attachAgent makes one hybrid-vsock connection to the guest agent behind
// uds and attaches to its tree; ctx's deadline bounds the whole session.
func attachAgent(ctx context.Context, uds string) (*p9.Client, p9.File, error) {
	c, err := hybrid.Dial(ctx, uds, hybrid.AgentPort)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	cl, err := ninep.NewClient(c, 64<<10)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	root, err := cl.Attach("/")
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return cl, root, nil
}

// waitAgent retries attachAgent every `every` until an attach answers (the
// agent serves) or ctx ends.
func waitAgent(ctx context.Context, uds string, every time.Duration) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cl, _, err := attachAgent(actx, uds)
		cancel()
		if err == nil {
			return cl.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent not serving: %v", err)
		case <-time.After(every):
		}
	}
}

// guestSh runs `sh -c cmd` in the guest through the agent's procs/ and
// waits for it; an exit other than 0 is an error.
func guestSh(ctx context.Context, uds, cmd string) error {
	cl, root, err := attachAgent(ctx, uds)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, clone, err := root.Walk([]string{"procs", "clone"})
	if err != nil {
		return fmt.Errorf("walk procs/clone: %w", err)
	}
	if _, _, err := clone.Open(p9.ReadWrite); err != nil {
		return fmt.Errorf("open procs/clone: %w", err)
	}
	b := make([]byte, 32)
	n, err := clone.ReadAt(b, 0)
	slot := strings.TrimSpace(string(b[:n]))
	if err != nil || slot == "" || strings.ContainsAny(slot, "/ ") {
		return fmt.Errorf("read procs/clone: %q, %v", slot, err)
	}
	if _, err := clone.WriteAt([]byte("exec "+msg.Quote(cmd)), 0); err != nil {
		return fmt.Errorf("exec %s: %w", msg.Cite(cmd), err)
	}
	_, wait, err := root.Walk([]string{"procs", slot, "wait"})
	if err != nil {
		return fmt.Errorf("walk procs/%s/wait: %w", slot, err)
	}
	if _, _, err := wait.Open(p9.ReadOnly); err != nil {
		return fmt.Errorf("open procs/%s/wait: %w", slot, err)
	}
	b = make([]byte, 256)
	n, err = wait.ReadAt(b, 0)
	line := strings.TrimSpace(string(b[:n]))
	if n == 0 && err != nil {
		return fmt.Errorf("read procs/%s/wait: %w", slot, err)
	}
	if f := strings.Fields(line); len(f) < 3 || f[1] != "exited" || f[2] != "code=0" {
		return fmt.Errorf("guest %s: %s", msg.Cite(cmd), line)
	}
	return nil
}
