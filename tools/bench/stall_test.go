package bench

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestStallWatch: the watch fires once the touches stop for its time,
// not while they go on, and not after close.
func TestStallWatch(t *testing.T) {
	var fired atomic.Int32
	// Margins of seconds, so that a loaded -race run's scheduling
	// cannot stretch a touch's gap to the watch's time.
	w := watchStall(2*time.Second, func(time.Duration) { fired.Add(1) })
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		w.touch()
	}
	if fired.Load() != 0 {
		t.Fatal("fired while touched")
	}
	time.Sleep(4 * time.Second)
	w.close()
	if fired.Load() != 1 {
		t.Fatalf("fired %d times after 4 s untouched; want once", fired.Load())
	}
	w = watchStall(200*time.Millisecond, func(time.Duration) { fired.Add(1) })
	w.close()
	time.Sleep(400 * time.Millisecond)
	if fired.Load() != 1 {
		t.Fatal("fired after close")
	}
}

// TestServingStacks keeps the goroutines of a traceback that were in the
// 9P server or a world.
func TestServingStacks(t *testing.T) {
	dump := "SIGQUIT: quit\n\ngoroutine 1 [select]:\nmain.main()\n\n" +
		"goroutine 7 [IO wait]:\nsandfs/fs/ninep.(*frameReader).next()\n\n" +
		"goroutine 9 [semacquire]:\nsandfs/world.(*World).resolve()\n"
	got := servingStacks([]byte(dump), 40)
	if !strings.Contains(got, "goroutine 7") || !strings.Contains(got, "goroutine 9") || strings.Contains(got, "goroutine 1 ") {
		t.Errorf("kept:\n%s", got)
	}
	if got := servingStacks([]byte(dump), 1); !strings.Contains(got, "(1 more)") {
		t.Errorf("with max 1:\n%s", got)
	}
}
