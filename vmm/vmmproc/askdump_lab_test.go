package vmmproc

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sandfs/vmm/virtio"
)

// TestAskDump: a VMM launched with virtio.DebugEnv writes its state dump,
// the interrupt controllers included, to its log when asked (what the
// daemon does before giving up a restored machine whose agent never
// answered), and runs on.
func TestAskDump(t *testing.T) {
	t.Setenv(virtio.DebugEnv, "1")
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "ticks")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitConsole(t, p, cfg, "tick 1\r\n", bootTimeout)
	p.AskDump()
	wants := []string{"virtio debug dump", "interrupts:", "lapic: tpr="}
	l := waitLog(cfg.LogFile, wants...)
	for _, want := range wants {
		if !strings.Contains(l, want) {
			t.Errorf("vmm.log after AskDump lacks %q:\n%s", want, tail(l, 3000))
		}
	}
	b, _ := os.ReadFile(cfg.Console)
	waitConsole(t, p, cfg, "tick "+strconv.Itoa(countTicks(string(b))+1)+"\r\n", bootTimeout) // it runs on
}
