package probe

import (
	"fmt"
	"os"
	"sync"
)

// Verdict is the probe's answer: run guests natively, or in the lab.
type Verdict struct {
	Native bool
	Reason string // one line, for banners and skip messages
	Facts  Facts
}

// Mode is "native" or "lab", the word `sandfs probe` prints first.
func (v Verdict) Mode() string {
	if v.Native {
		return "native"
	}
	return "lab"
}

// String is the banner line: "<mode>: <reason>".
func (v Verdict) String() string { return v.Mode() + ": " + v.Reason }

// MinLoopRatio is the slowest test-guest loop, as a fraction of the same
// loop run by the host itself just before and after (Facts.HostLoopRate),
// taken as native. A ratio, not a rate, so that a loaded machine (both
// loops slow down together) is not mistaken for an emulating one:
// hardware-virtualized vCPUs run the loop at about the host's speed,
// nested KVM inside the lab (TCG) at a similar fraction of the lab's own
// speed, while PVM ran it at 5.6e5/s against 1.5e9/s for its host's
// own loop (4e-4). The lab under load measured 4.2e7/s, which a fixed floor of
// 5e7/s once judged "too slow" and so refused every sandbox; its ratio
// is 0.22-0.52, but a heavily loaded lab once measured 0.045, so the
// floor is 0.02 (still 50 x PVM's) and Gather takes the best of up to
// three measurements.
const MinLoopRatio = 0.02

// Decide turns the facts of a host into a verdict. It is pure: the checks
// run in a fixed order and the first that fails gives the reason.
func Decide(f Facts) Verdict {
	lab := func(format string, a ...any) Verdict {
		return Verdict{Reason: fmt.Sprintf(format, a...), Facts: f}
	}
	switch {
	case f.ForceLab:
		return lab("SANDFS_FORCE_LAB=1 is set")
	case f.Device == DeviceAbsent:
		return lab("this host has no /dev/kvm (no hardware virtualization exposed to it)")
	case f.Device == DeviceNotChar:
		return lab("/dev/kvm is not a character device")
	case f.Device == DeviceUnusable:
		return lab("/dev/kvm does not open as KVM: %s", f.DeviceErr)
	case f.PVM:
		return lab("/dev/kvm is PVM (kvm_pvm), which cannot run the standard guest kernel")
	case !f.VMX && !f.SVM:
		return lab("/dev/kvm exists but the CPU advertises neither vmx nor svm (PVM or emulated KVM)")
	case len(f.MissingCaps) > 0:
		return lab("/dev/kvm lacks capabilities the VMM needs: %v", f.MissingCaps)
	case f.GuestErr != "":
		return lab("timed test guest on /dev/kvm failed: %s", f.GuestErr)
	case !(f.LoopRate >= MinLoopRatio*f.HostLoopRate) || f.HostLoopRate <= 0:
		return lab("/dev/kvm is too slow for native guests: test loop %.2g iter/s, %.2g of the host's %.2g (< %g)",
			f.LoopRate, f.LoopRate/f.HostLoopRate, f.HostLoopRate, MinLoopRatio)
	}
	return Verdict{Native: true, Facts: f, Reason: fmt.Sprintf(
		"/dev/kvm runs guests natively: test loop %.2g iter/s (%.2g of the host's), %.2g PIO exits/s", f.LoopRate, f.LoopRate/f.HostLoopRate, f.ExitRate)}
}

// Probe gathers this host's facts and decides.
func Probe() Verdict { return Decide(Gather("/dev/kvm")) }

var (
	once   sync.Once
	cached Verdict
)

// Cached runs Probe once per process.
func Cached() Verdict {
	once.Do(func() { cached = Probe() })
	return cached
}

func forceLab() bool { return os.Getenv("SANDFS_FORCE_LAB") == "1" }
