package lab

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// ProbeResult says whether this host runs a standard sandfs guest natively
// (KVM with hardware virtualization) or needs the lab.
type ProbeResult struct {
	Native bool
	Reason string // one line, for banners
	Guest  *TestGuestResult
}

// Thresholds for the timed test guest. A hardware-virtualized vCPU runs the
// tight loop at ~1e9/s, nested-under-TCG at ~2e8/s; PVM measured 5.6e5/s.
const (
	probeLoops        = 20_000_000
	probeExits        = 2000
	minNativeLoopRate = 5e7
)

var (
	probeOnce sync.Once
	probeRes  ProbeResult
)

// ProbeCached runs Probe once per process.
func ProbeCached() ProbeResult {
	probeOnce.Do(func() { probeRes = Probe() })
	return probeRes
}

// Probe decides at run time whether this host can run guests natively:
// /dev/kvm must exist and open, the CPU must advertise vmx or svm (a PVM
// /dev/kvm does not, and cannot boot the stock guest kernel), and a timed
// test guest must run at hardware speed. SANDFS_FORCE_LAB=1 forces the lab.
func Probe() ProbeResult {
	if os.Getenv("SANDFS_FORCE_LAB") == "1" {
		return ProbeResult{Reason: "SANDFS_FORCE_LAB=1 is set"}
	}
	st, err := os.Stat("/dev/kvm")
	if err != nil {
		return ProbeResult{Reason: "this host has no /dev/kvm (no hardware virtualization exposed to it)"}
	}
	if st.Mode()&os.ModeCharDevice == 0 {
		return ProbeResult{Reason: "/dev/kvm is not a character device"}
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return ProbeResult{Reason: "/dev/kvm is PVM (kvm_pvm), which cannot run the standard guest kernel"}
	}
	flags := cpuFlags()
	if !flags["vmx"] && !flags["svm"] {
		return ProbeResult{Reason: "/dev/kvm exists but the CPU advertises neither vmx nor svm (PVM or emulated KVM)"}
	}
	type out struct {
		r   TestGuestResult
		err error
	}
	ch := make(chan out, 1)
	go func() {
		r, err := RunTestGuest("/dev/kvm", probeLoops, probeExits, 20*time.Second)
		ch <- out{r, err}
	}()
	var o out
	select {
	case o = <-ch:
	case <-time.After(20 * time.Second):
		return ProbeResult{Reason: "timed test guest on /dev/kvm did not finish in 20s"}
	}
	if o.err != nil {
		return ProbeResult{Reason: fmt.Sprintf("timed test guest on /dev/kvm failed: %v", o.err)}
	}
	rate := o.r.LoopsPerSec()
	if rate < minNativeLoopRate {
		return ProbeResult{Guest: &o.r, Reason: fmt.Sprintf(
			"/dev/kvm is too slow for native guests: test loop %.2g iter/s < %.0g", rate, minNativeLoopRate)}
	}
	return ProbeResult{Native: true, Guest: &o.r, Reason: fmt.Sprintf(
		"/dev/kvm runs guests natively: test loop %.2g iter/s, %.2g PIO exits/s", rate, o.r.ExitsPerSec())}
}

func cpuFlags() map[string]bool {
	m := map[string]bool{}
	for _, l := range readLines("/proc/cpuinfo") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				m[f] = true
			}
			break
		}
	}
	return m
}
