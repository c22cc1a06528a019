package guestlab

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/vmm/virtio"
)

// worldHopsPy runs in the guest: the same stats (a walk, a getattr and a
// clunk each, cache=none) and one 16 MiB read in 512 KiB reads, on
// /workspace (virtio-9p, mounted again cache=none: the transport is
// measured, not the guest's cache) or on a second mount of the world over a vsock
// connection (trans=fd, as before the device), or on a third, over
// vsock too, mounted cache=loose (the cache docs/worlds.md declines),
// after two warm-up stats on each; it prints the phase's seconds.
const worldHopsPy = `
import os, socket, subprocess, sys, time
if not os.path.exists("/tmp/hops-remounted"):
    subprocess.run(["umount", "/workspace"], check=True)
    subprocess.run(["mount", "-t", "9p", "-o", "trans=virtio,version=9p2000.L,msize=512000,access=any,cache=none", "sandfs-world", "/workspace"], check=True)
    open("/tmp/hops-remounted", "w").close()
for m, cache in [("/mnt/fd", "none"), ("/mnt/loose", "loose")]:
    os.makedirs(m, exist_ok=True)
    if not os.path.ismount(m):
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.connect((2, 565))
        fd = s.fileno(); os.set_inheritable(fd, True)
        subprocess.run(["mount", "-t", "9p", "-o", "trans=fd,rfdno=%d,wfdno=%d,version=9p2000.L,msize=524288,access=any,cache=%s" % (fd, fd, cache), "w", m], pass_fds=[fd], check=True)
def stats(d, n):
    t = time.perf_counter()
    for _ in range(n): os.stat(d + "/f.txt")
    return time.perf_counter() - t
def big(d):
    t = time.perf_counter()
    with open(d + "/big.bin", "rb", buffering=0) as f:
        while f.read(512000): pass
    return time.perf_counter() - t
for d in ["/workspace", "/mnt/fd", "/mnt/loose"]: stats(d, 2)
mode = sys.argv[1]
d = {"virtio": "/workspace", "fd": "/mnt/fd", "loose": "/mnt/loose"}[mode]
if sys.argv[2] == "stat": print(stats(d, int(sys.argv[3])))
else: print(big(d))
`

var hopsLine = regexp.MustCompile(`9p: .* requests=(\d+) replies=(\d+) inline=\d+ direct=\d+ passed=\d+ replyBytes=(\d+) sentNs=(\d+) replyNs=(\d+) pushNs=(\d+) kicks=(\d+) kickNs=(\d+) writeNs=(\d+)`)

// BenchmarkWorldHops splits a /workspace request's time (docs/bench/worlds.md):
// the guest's time per 9P request on the virtio-9p mount and on a vsock
// (trans=fd) mount of the same world (and, for the cache's ceiling, on a
// cache=loose one), and the VMM's share of the first
// (its device's counters, dumped with SIGUSR1 around each phase): from
// taking the chain to the reply read back from the daemon (the socket
// both ways and the daemon's service), and from there to the used ring.
//
//	bin/sandfs lab -- /opt/sandfs/bin/tests/test_guestlab.test -test.run '^$' -test.bench WorldHops -test.benchtime 1x
func BenchmarkWorldHops(b *testing.B) {
	need(b)
	b.Setenv(virtio.DebugEnv, "1")
	d := startDaemon(b)
	lower := b.TempDir()
	for _, p := range []string{filepath.Dir(lower), lower} {
		os.Chmod(p, 0o755)
	}
	os.WriteFile(filepath.Join(lower, "f.txt"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(lower, "big.bin"), make([]byte, 16<<20), 0o644)
	os.WriteFile(filepath.Join(lower, "hops.py"), []byte(worldHopsPy), 0o644)
	d.mustSh(b, "echo 'world w lower="+lower+"' > ctl; echo 'new t template=base world=w' > ctl")
	d.waitAgent(b, "t")
	d.mustSh(b, `echo 'cp /workspace/hops.py /tmp/hops.py' > sandboxes/t/exec; cat sandboxes/t/exec`)
	runs := filepath.Join(filepath.Dir(d.mnt), "st/run")
	const n = 100
	for range b.N {
		seen := map[string]bool{}
		for _, phase := range []struct{ mode, what string }{{"virtio", "stat"}, {"fd", "stat"}, {"loose", "stat"}, {"virtio", "big"}, {"fd", "big"}, {"loose", "big"}, {"loose", "big"}} {
			before := d.hops(b, runs)
			out := d.mustSh(b, fmt.Sprintf(`echo 'python3 /tmp/hops.py %s %s %d' > sandboxes/t/exec; cat sandboxes/t/exec`, phase.mode, phase.what, n))
			after := d.hops(b, runs)
			secs, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
			if err != nil {
				b.Fatalf("guest: %q", out)
			}
			name := phase.mode + "-" + phase.what
			if seen[name] {
				name += "-again"
			}
			seen[name] = true
			if phase.what == "stat" {
				b.ReportMetric(secs/n*1e3, name+"-ms/stat")
			} else {
				b.ReportMetric(16/secs, name+"-MiB/s")
			}
			if phase.mode == "virtio" {
				// The device's counters count the warm-up passes too.
				req, rep := after[0]-before[0], after[1]-before[1]
				kicks := after[6] - before[6]
				b.Logf("%s: guest %.3fs (%.2fms per request); device: %.0f requests, %.0f replies, %.0f reply bytes; per request popped→sent %.2fms (of which the write %.2fms), popped→reply %.2fms, reply→pushed %.2fms; notify→popped %.2fms per wake-up (%.0f)",
					name, secs, ms(secs*1e9, req), req, rep, after[2]-before[2], ms(after[3]-before[3], req), ms(after[8]-before[8], req), ms(after[4]-before[4], rep), ms(after[5]-before[5], rep), ms(after[7]-before[7], kicks), kicks)
			}
		}
	}
}

func ms(ns, n float64) float64 {
	if n == 0 {
		return 0
	}
	return ns / n / 1e6
}

// hops dumps the VMMs' virtio state and returns the 9p device's counters
// (requests, replies, replyBytes, sentNs, replyNs, pushNs, kicks, kickNs,
// writeNs) from the last
// dump in vmm.log.
func (d *daemon) hops(tb testing.TB, runs string) [9]float64 {
	tb.Helper()
	logs, _ := filepath.Glob(filepath.Join(runs, "*/vmm.log"))
	if len(logs) != 1 {
		tb.Fatalf("vmm.log: %v", logs)
	}
	old, _ := os.ReadFile(logs[0])
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		c, _ := os.ReadFile(p)
		if strings.Contains(string(c), runs+"/") && strings.Contains(string(c), "vmm.sock.json") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			syscall.Kill(pid, syscall.SIGUSR1)
		}
	}
	var v [9]float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		b, _ := os.ReadFile(logs[0])
		m := hopsLine.FindAllStringSubmatch(string(b[min(len(old), len(b)):]), -1)
		if len(m) == 0 {
			continue
		}
		for i := range v {
			v[i], _ = strconv.ParseFloat(m[len(m)-1][i+1], 64)
		}
		return v
	}
	tb.Fatal("no 9p line in the VMM's dump")
	return v
}
