package ctlfs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hugelgupf/p9/p9"
)

// BenchmarkStatusRead reads one sandbox's status file (open, read to EOF,
// close) over FUSE and over 9P (p9 client on a unix socket), and, in the
// same run, a regular file of the same size through go-fuse's loopback
// file system, and reports each cost and the ratios to the loopback:
//
//	go test -run - -bench StatusRead -benchtime 2000x ./fs/ctlfs/
func BenchmarkStatusRead(b *testing.B) {
	e := newEnv(b, "")
	if _, err := e.plane.Ctl(context.Background(), []byte("new bench")); err != nil {
		b.Fatal(err)
	}
	root := e.tree.Root()
	fuseDir := mountFUSE(b, root).dir
	p9root, err := dial9P(b, serve9P(b, root, "unix", ""), "")
	if err != nil {
		b.Fatal(err)
	}
	status, err := os.ReadFile(filepath.Join(fuseDir, "sandboxes/bench/status"))
	if err != nil {
		b.Fatal(err)
	}

	// The loopback: a real file of the same size, through go-fuse.
	src, loopDir := b.TempDir(), b.TempDir()
	if err := os.WriteFile(filepath.Join(src, "status"), status, 0o644); err != nil {
		b.Fatal(err)
	}
	lroot, err := gofs.NewLoopbackRoot(src)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := gofs.Mount(loopDir, lroot, &gofs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Unmount() })

	names := split("sandboxes/bench/status")
	buf := make([]byte, 4096)
	read9P := func() {
		_, f, err := p9root.Walk(names)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			b.Fatal(err)
		}
		if n, err := f.ReadAt(buf, 0); err != nil || n != len(status) {
			b.Fatalf("9P read = %d, %v", n, err)
		}
		f.Close()
	}
	readOS := func(p string) func() {
		return func() {
			if got, err := os.ReadFile(p); err != nil || len(got) != len(status) {
				b.Fatalf("read %s = %d bytes, %v", p, len(got), err)
			}
		}
	}
	// The three reads take turns in every iteration, so that a change in
	// the machine's load hits them alike and the ratios stay stable.
	paths := []func(){readOS(filepath.Join(fuseDir, "sandboxes/bench/status")), read9P, readOS(filepath.Join(loopDir, "status"))}
	var total [3]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, f := range paths {
			start := time.Now()
			f()
			total[j] += time.Since(start)
		}
	}
	b.StopTimer()
	ns := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	fuseNs, p9Ns, loopNs := ns(total[0]), ns(total[1]), ns(total[2])
	b.ReportMetric(fuseNs, "fuse-ns/read")
	b.ReportMetric(p9Ns, "9p-ns/read")
	b.ReportMetric(loopNs, "loopback-ns/read")
	b.ReportMetric(fuseNs/loopNs, "fuse/loopback")
	b.ReportMetric(p9Ns/loopNs, "9p/loopback")
}
