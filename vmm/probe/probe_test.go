package probe

import (
	"strings"
	"testing"
)

// Recorded hosts: the facts Gather read (or would read) on each kind of
// machine sandfs meets, and the verdict each must get.
var recorded = []struct {
	name   string
	f      Facts
	native bool
	reason string // a substring of the verdict's reason
}{
	{"no /dev/kvm (developer laptop, cloud VM without nesting)",
		Facts{Device: DeviceAbsent}, false, "no /dev/kvm"},
	{"PVM cloud VM (kvm_pvm loaded, no vmx/svm, loop 5.6e5/s)",
		Facts{PVM: true, LoopRate: 5.6e5}, false, "PVM"},
	{"emulated /dev/kvm without vmx or svm",
		Facts{}, false, "neither vmx nor svm"},
	{"/dev/kvm a plain file",
		Facts{Device: DeviceNotChar}, false, "not a character device"},
	{"/dev/kvm that does not open (permissions)",
		Facts{Device: DeviceUnusable, DeviceErr: "open /dev/kvm: permission denied"}, false, "permission denied"},
	{"nested KVM missing a capability",
		Facts{SVM: true, MissingCaps: []string{"KVM_CAP_PIT2"}}, false, "KVM_CAP_PIT2"},
	{"test guest fails",
		Facts{VMX: true, GuestErr: "test guest stopped with KVM exit reason 17"}, false, "exit reason 17"},
	{"nested KVM too slow",
		Facts{VMX: true, LoopRate: 3e6, HostLoopRate: 1e9, ExitRate: 1e4}, false, "too slow"},
	{"a test guest but no host loop measured",
		Facts{VMX: true, LoopRate: 1e9}, false, "too slow"},
	{"SANDFS_FORCE_LAB=1 on a native host",
		Facts{ForceLab: true, VMX: true, LoopRate: 1e9, HostLoopRate: 1e9}, false, "SANDFS_FORCE_LAB"},
	{"the lab (nested SVM under QEMU TCG, loop 2e8/s)",
		Facts{SVM: true, LoopRate: 2e8, HostLoopRate: 3e8, ExitRate: 2e4}, true, "natively"},
	{"the lab under load (loop 4.2e7/s, the lab's own loop as slow)",
		Facts{SVM: true, LoopRate: 4.2e7, HostLoopRate: 6e7, ExitRate: 5e3}, true, "natively"},
	{"the lab heavily loaded (ratio 0.045, seen once)",
		Facts{SVM: true, LoopRate: 2.7e6, HostLoopRate: 6e7, ExitRate: 2e3}, true, "natively"},
	{"PVM's ratio (4e-4)",
		Facts{SVM: true, LoopRate: 5.6e5, HostLoopRate: 1.5e9, ExitRate: 1e3}, false, "too slow"},
	{"bare-metal KVM (vmx, loop 1e9/s)",
		Facts{VMX: true, LoopRate: 1e9, HostLoopRate: 1.1e9, ExitRate: 5e5}, true, "natively"},
}

func TestDecideRecordedHosts(t *testing.T) {
	for _, c := range recorded {
		v := Decide(c.f)
		if v.Native != c.native || !strings.Contains(v.Reason, c.reason) {
			t.Errorf("%s: got %q, want native=%v with %q", c.name, v, c.native, c.reason)
		}
	}
}

// TestCPUFlagsRecorded: the flags line recorded on a PVM cloud VM has
// neither vmx nor svm but does say hypervisor.
func TestCPUFlagsRecorded(t *testing.T) {
	f := cpuFlags("testdata/cpuinfo-pvm")
	if f["vmx"] || f["svm"] || !f["hypervisor"] || !f["lm"] {
		t.Fatalf("flags: vmx=%v svm=%v hypervisor=%v lm=%v", f["vmx"], f["svm"], f["hypervisor"], f["lm"])
	}
}

func TestTestGuestCode(t *testing.T) {
	c := testGuestCode(0x01020304, 0x0506)
	if c[2] != 4 || c[5] != 1 || c[15] != 6 || c[16] != 5 || c[len(c)-1] != 0xf4 {
		t.Fatalf("immediates or hlt misplaced: % x", c)
	}
}

// TestGatherAgreesWithHost: on this host, the gathered facts are
// consistent with what the system shows, and a PVM host is never native.
func TestGatherAgreesWithHost(t *testing.T) {
	v := Probe()
	t.Logf("this host: %s", v)
	if v.Facts.PVM && v.Native {
		t.Fatal("a PVM host was judged native")
	}
	if v.Native && v.Facts.LoopRate < MinLoopRatio*v.Facts.HostLoopRate {
		t.Fatalf("native with loop rate %.2g, host %.2g", v.Facts.LoopRate, v.Facts.HostLoopRate)
	}
}
