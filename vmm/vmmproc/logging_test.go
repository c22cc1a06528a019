package vmmproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sandfs/test/syncbuf"
	"sandfs/vmm"
	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/rng"
	"sandfs/vmm/virtio/virtiotest"
)

// TestGuestLogFlood: a guest driver repeats, at MMIO speed, the two virtio
// writes the VMM logs for (FEATURES_OK with a feature set lacking
// VERSION_1, and a Status write that clears a bit), 100,000 times each
// over 100 s of (fake) time. Through the VMM's logger (newLogger, which
// Main makes the default) that is at most logBurst lines per message plus
// one per logEvery, far below LogMax, and the lines that pass say how
// many were dropped. Unlimited, it was one line per write, 20 MiB. The
// device is undisturbed: a driver that then resets it gets entropy.
func TestGuestLogFlood(t *testing.T) {
	var out syncbuf.Buffer
	var mu sync.Mutex
	clock := time.Unix(1e9, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	old := slog.Default()
	slog.SetDefault(newLogger(&out, now))
	defer slog.SetDefault(old)

	mem, irq := virtiotest.NewMem(4<<20), virtiotest.NewIRQ()
	dev := rng.New(mem, irq, 5)
	defer dev.Close()
	d := &virtiotest.Driver{Dev: dev.Transport(), Mem: mem, IRQ: irq}
	const (
		rounds  = 100_000
		perTick = 1000 // rounds per simulated second
		ack     = virtio.StatusAcknowledge
		drv     = virtio.StatusDriver
	)
	for i := range rounds {
		d.SetReg32(0x070, 0)                               // reset
		d.SetReg32(0x070, ack|drv)                         //
		d.SetReg32(0x070, ack|drv|virtio.StatusFeaturesOK) // DriverFeatures 0: refused
		d.SetReg32(0x070, ack)                             // clears DRIVER: refused
		if i%perTick == perTick-1 {
			mu.Lock()
			clock = clock.Add(time.Second)
			mu.Unlock()
		}
	}
	text := out.String()
	lines := strings.Count(text, "\n")
	elapsed := time.Duration(rounds/perTick) * time.Second
	max := 2 * (logBurst + int(elapsed/logEvery) + 1)
	if lines > max || len(text) > LogMax/100 {
		t.Errorf("%d refused writes logged %d lines (%d bytes), want at most %d lines; head:\n%s",
			2*rounds, lines, len(text), max, tail(text[:min(len(text), 2000)], 2000))
	}
	for _, msg := range []string{"virtio: features refused", "virtio: status write refused"} {
		if !strings.Contains(text, msg) {
			t.Errorf("log has no %q line at all:\n%s", msg, tail(text, 2000))
		}
	}
	if !strings.Contains(text, " dropped=") {
		t.Errorf("no line says how many were dropped:\n%s", tail(text, 2000))
	}

	d = virtiotest.Init(t, dev.Transport(), mem, irq, virtiotest.Options{})
	d.AddKick(0, virtiotest.W(64))
	if u := d.MustWait(0); u.Len != 64 || bytes.Equal(u.Out, make([]byte, 64)) {
		t.Errorf("rng after the flood returned %d bytes %x", u.Len, u.Out)
	}
}

// TestLimiterPerMessage: one message's flood does not use up another's
// budget; a bucket refills at one record per logEvery.
func TestLimiterPerMessage(t *testing.T) {
	clock := time.Unix(1e9, 0)
	l := &limiter{now: func() time.Time { return clock }, m: map[string]*bucket{}}
	for range 1000 {
		l.take("flood")
	}
	if _, ok := l.take("other"); !ok {
		t.Errorf("take(other) refused after a flood of another message")
	}
	if _, ok := l.take("flood"); ok {
		t.Errorf("take(flood) passed with an empty bucket")
	}
	clock = clock.Add(logEvery)
	if n, ok := l.take("flood"); !ok || n != 1000-logBurst+1 {
		t.Errorf("take(flood) after logEvery = %d, %v; want %d, true", n, ok, 1000-logBurst+1)
	}
}

// logFloodEnv makes the test binary, run as `sandfs vmm` by Launch, the
// VMM of TestVMMLogCapped (logFloodVMM).
const logFloodEnv = "SANDFS_TEST_LOGFLOOD"

// logFloodVMM is a VMM gone wrong, or taken over by its guest: it writes
// 2×LogMax bytes to its stderr, then serves the control tree (a fake
// machine) until stop.
func logFloodVMM() {
	chunk := bytes.Repeat([]byte(strings.Repeat("x", 63)+"\n"), 1024)
	for n := 0; n < 2*LogMax; n += len(chunk) {
		os.Stderr.Write(chunk)
	}
	ln, err := controlListener()
	if err != nil {
		os.Exit(codeError)
	}
	c := newControl(&fakeMachine{mem: 2 << 20}, &Config{}, nil)
	hungUp := c.serve(context.Background(), ln)
	<-c.stopped
	hungUp()
	os.Exit(codeStopped)
}

// TestVMMLogCapped: the daemon caps vmm.log at LogMax however much the VMM
// writes to its stderr (a VMM flooding 2×LogMax), counting what the file
// held from an earlier run, and notes the cut; the VMM is neither blocked
// nor killed by it (it answers and stops normally). A Detached VMM's
// stderr goes through its named pipe (logpipe.go), capped the same.
func TestVMMLogCapped(t *testing.T) {
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) { testVMMLogCapped(t, detached) })
	}
}

func testVMMLogCapped(t *testing.T, detached bool) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "vmm.log")
	earlier := rand.Text() + "\n"
	if err := os.WriteFile(logPath, []byte(earlier), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Launch(ctx, Config{Kernel: "unused", MemBytes: 2 << 20, CPUs: 1, Binary: bin,
		Socket: filepath.Join(dir, "vmm.sock"), LogFile: logPath, Env: []string{logFloodEnv + "=1"}, Detached: detached})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	<-p.Done()
	if r, err := p.Wait(); r != vmm.ExitStopped || err != nil {
		t.Errorf("flooding VMM ended %s, %v; want stopped", r, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "vmm.sock"+logFIFOSuffix)); !os.IsNotExist(err) {
		t.Errorf("the log pipe after the end: %v; want it removed", err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > LogMax {
		t.Errorf("vmm.log is %d bytes after a %d-byte flood, want at most LogMax = %d", len(b), 2*LogMax, LogMax)
	}
	if !strings.HasPrefix(string(b), earlier) {
		t.Errorf("vmm.log lost the earlier run's text %q", earlier)
	}
	if !strings.HasSuffix(string(b), "[sandfs: vmm.log truncated]\n") {
		t.Errorf("vmm.log does not end with the truncation note: ...%q", b[max(0, len(b)-80):])
	}
}

// TestCappedWriter: the cap counts what the file held; the note is written
// once, within the cap; writes never fail.
func TestCappedWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("0123456789")
	w := capFile(f, 30, "|cut\n")
	for _, s := range []string{"abcdef", "ghijklmnop", "qrstuv", "wxyz"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Errorf("Write(%q) = %d, %v", s, n, err)
		}
	}
	b, _ := os.ReadFile(f.Name())
	if want := "0123456789abcdefghijklmno|cut\n"; string(b) != want {
		t.Errorf("file = %q, want %q", b, want)
	}
}
