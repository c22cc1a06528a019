package probe

import (
	"os"
	"strings"
	"time"

	"sandfs/vmm/kvm"
)

// Device is what stat and open say of /dev/kvm.
type Device int

const (
	DeviceOK       Device = iota // a character device that opens as KVM API 12
	DeviceAbsent                 // no such file
	DeviceNotChar                // exists but is not a character device
	DeviceUnusable               // open or KVM_GET_API_VERSION failed
)

// Facts are what Gather read off a host. Gather stops at the first fact
// that already decides, so later fields may be zero.
type Facts struct {
	ForceLab    bool     // SANDFS_FORCE_LAB=1
	Device      Device   // /dev/kvm
	DeviceErr   string   // why DeviceUnusable
	PVM         bool     // /sys/module/kvm_pvm exists
	VMX, SVM    bool     // /proc/cpuinfo flags
	MissingCaps []string // kvm.Required capabilities KVM_CHECK_EXTENSION denies
	GuestErr    string   // the timed test guest failed
	LoopRate    float64  // test guest: tight-loop iterations per second
	// HostLoopRate is the same loop's rate in this process, the mean of
	// runs just before and just after the test guest's.
	HostLoopRate float64
	ExitRate     float64 // test guest: port-I/O exits per second
}

// Test-guest sizes: about 20 ms of loop at hardware speed, and a bound on
// the whole run for hosts that emulate.
const (
	probeLoops   = 20_000_000
	probeExits   = 2000
	probeTimeout = 20 * time.Second
	probeRounds  = 3 // measurements at most, while the ratio is below MinLoopRatio
)

// Gather reads the facts of this host, using dev as /dev/kvm.
func Gather(dev string) Facts {
	var f Facts
	if f.ForceLab = forceLab(); f.ForceLab {
		return f
	}
	st, err := os.Stat(dev)
	switch {
	case err != nil:
		f.Device = DeviceAbsent
		return f
	case st.Mode()&os.ModeCharDevice == 0:
		f.Device = DeviceNotChar
		return f
	}
	sys, err := kvm.Open(dev)
	if err != nil {
		f.Device, f.DeviceErr = DeviceUnusable, err.Error()
		return f
	}
	defer sys.Close()
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		f.PVM = true
		return f
	}
	flags := cpuFlags("/proc/cpuinfo")
	f.VMX, f.SVM = flags["vmx"], flags["svm"]
	if !f.VMX && !f.SVM {
		return f
	}
	for _, c := range kvm.Required {
		if sys.CheckExtension(c.Cap) == 0 {
			f.MissingCaps = append(f.MissingCaps, c.Name)
		}
	}
	if len(f.MissingCaps) > 0 {
		return f
	}
	f.measure(probeRounds, func() (TestGuestResult, error) {
		return RunTestGuest(sys, probeLoops, probeExits, probeTimeout)
	}, func() float64 { return HostLoopRate(probeLoops) })
	return f
}

// measure fills f's rates from at most rounds runs of the test guest
// (guest), each between two runs of the host's loop (host). A loaded
// machine can slow the guest's loop and not the host's (or the reverse)
// for one run: the best ratio decides, and the runs end once it is fast
// enough. A run that fails (a nested guest that stalled, as in the lab,
// 2026-12-02) is one bad run, not the verdict: GuestErr says the last
// failure only when no run finished.
func (f *Facts) measure(rounds int, guest func() (TestGuestResult, error), host func() float64) {
	measured := false
	for range rounds {
		before := host()
		r, err := guest()
		if err != nil {
			if !measured {
				f.GuestErr = err.Error()
			}
			continue
		}
		h := (before + host()) / 2
		if !measured || f.HostLoopRate == 0 || h > 0 && r.LoopsPerSec()/h > f.LoopRate/f.HostLoopRate {
			f.HostLoopRate, f.LoopRate, f.ExitRate = h, r.LoopsPerSec(), r.ExitsPerSec()
		}
		measured, f.GuestErr = true, ""
		if f.HostLoopRate > 0 && f.LoopRate >= MinLoopRatio*f.HostLoopRate {
			break
		}
	}
}

// HostLoopRate runs the test guest's loop (count down, branch while not
// zero) n times in this process and returns its iterations per second,
// or 0 if the clock did not advance (seen once in the lab).
func HostLoopRate(n uint32) float64 {
	start := time.Now()
	loopSink = countDown(n)
	d := time.Since(start)
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// loopSink keeps countDown's result, so that its loop is not removed.
var loopSink uint32

//go:noinline
func countDown(n uint32) uint32 {
	var x uint32
	for i := n; i != 0; i-- {
		x += i
	}
	return x
}

// cpuFlags returns the flags of the first processor in a cpuinfo file.
func cpuFlags(path string) map[string]bool {
	m := map[string]bool{}
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				m[f] = true
			}
			break
		}
	}
	return m
}
