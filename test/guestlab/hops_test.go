package guestlab

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"

	"sandfs/fs/ninep"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// BenchmarkFSHops reads the same 16 MiB guest file over each hop of the
// fs/ path, as ratios of the time to the guest's own dd from /tmp, to
// tell which hop costs what (docs/filesystem.md, "fs/ throughput: where
// the time goes"): 9P straight to the agent over the VMM's vsock socket
// (no daemon, no FUSE) with 128 KiB reads, 1000 KiB reads and four
// 128 KiB reads in flight, then through the FUSE mount, then the first
// again (the lab's load drifts within a run):
//
//	bin/sandfs lab -- /opt/sandfs/bin/tests/test_guestlab.test -test.run '^$' -test.bench FSHops -test.benchtime 1x
func BenchmarkFSHops(b *testing.B) {
	need(b)
	d := startDaemon(b)
	const size = 16 << 20
	d.mustSh(b, `echo 'new t template=base' > ctl; echo 'dd if=/dev/zero of=/tmp/hops bs=128k count=128 2>/dev/null; echo ok' > sandboxes/t/exec; cat sandboxes/t/exec`)
	socks, _ := filepath.Glob(filepath.Join(filepath.Dir(d.mnt), "st/run/*/vsock/vsock.sock"))
	if len(socks) != 1 {
		b.Fatalf("the sandbox's vsock socket: found %v", socks)
	}
	for range b.N {
		guestNs := d.guestNs(b, "t", `s=$(date +%s%N); dd if=/tmp/hops of=/dev/null bs=128k 2>/dev/null; e=$(date +%s%N); echo $((e-s))`)
		report := func(name string, t0 time.Time) {
			b.ReportMetric(float64(time.Since(t0).Nanoseconds())/guestNs, name+"/guest")
		}
		f := agentFile(b, socks[0], "tmp", "hops")
		t0 := time.Now()
		readAt(b, f, size, 128<<10, 1)
		report("agent-128K", t0)
		t0 = time.Now()
		readAt(b, f, size, 1000<<10, 1)
		report("agent-1000K", t0)
		t0 = time.Now()
		readAt(b, f, size, 128<<10, 4)
		report("agent-128Kx4", t0)
		t0 = time.Now()
		total := readThrough(b, filepath.Join(d.mnt, "sandboxes/t/fs/tmp/hops"), 128<<10)
		if total != size {
			b.Fatalf("FUSE read %d bytes of %d", total, size)
		}
		report("fuse-128K", t0)
		t0 = time.Now()
		readAt(b, f, size, 128<<10, 1)
		report("agent-128K-again", t0)
	}
}

// agentFile opens fs/<names> of the agent behind the VMM's vsock socket
// uds for reading, on a 9P session of its own, closed when the benchmark
// ends. Its msize is the 512 KiB the agent grants: hugelgupf/p9's client
// keeps the size it asks for, so with more it would send a 1000 KiB read
// whole and the agent would refuse it; with 512 KiB the client splits it.
func agentFile(b *testing.B, uds string, names ...string) p9.File {
	c, err := hybrid.Dial(context.Background(), uds, hybrid.AgentPort)
	if err != nil {
		b.Fatal(err)
	}
	cl, err := ninep.NewClient(c, 512<<10)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	root, err := cl.Attach("/")
	if err != nil {
		b.Fatal(err)
	}
	_, f, err := root.Walk(append([]string{"fs"}, names...))
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		b.Fatal(err)
	}
	return f
}

// readAt reads size bytes of f in chunk-sized reads, par of them in
// flight (each goroutine reading every par-th chunk).
func readAt(b *testing.B, f p9.File, size, chunk, par int) {
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for i := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for off := i * chunk; off < size; off += par * chunk {
				want := min(chunk, size-off)
				if n, err := f.ReadAt(buf[:want], int64(off)); err != nil || n != want {
					errs <- fmt.Errorf("read %d bytes at %d: got %d, %v", want, off, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
