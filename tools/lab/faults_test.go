package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLabSVMRips: faults.sh's labsvmrips names the dumped vCPU RIPs that
// lie in SVM code or page_fault_oops (a lab fault, rerun by
// run-tests.sh) and only those:
// a RIP in another function, below every symbol, or no RIP at all is
// none.
func TestLabSVMRips(t *testing.T) {
	syms := filepath.Join(t.TempDir(), "kallsyms")
	kallsyms := "ffffffff81000000 T _stext\n" +
		"ffffffff810ab050 t page_fault_oops\n" +
		"ffffffff810ab200 t do_user_addr_fault\n" +
		"ffffffff815d1500 T __svm_vcpu_run\n" +
		"ffffffff815d1700 t svm_vcpu_enter_exit\n" +
		"ffffffff815d1800 T amd_e400_idle\n" +
		"ffffffff815d1900 D some_data\n" +
		"ffffffff815d1a00 T memcpy\n"
	if err := os.WriteFile(syms, []byte(kallsyms), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(dump string) (string, bool) {
		t.Helper()
		cmd := exec.Command("bash", "-c", ". ./faults.sh; labsvmrips")
		cmd.Env = append(os.Environ(), "LAB_KALLSYMS="+syms)
		cmd.Stdin = strings.NewReader(dump)
		out, err := cmd.Output()
		if _, exit := err.(*exec.ExitError); err != nil && !exit {
			t.Fatal(err)
		}
		return string(out), err == nil
	}
	for _, tc := range []struct {
		name, dump, want string
	}{
		{"svm run", "  vcpu 0: rip=0xffffffff815d159c rflags=0x246 if=1\n", "0xffffffff815d159c __svm_vcpu_run\n"},
		{"two vcpus", "  vcpu 0: rip=0xffffffff815d1800 if=1\n  vcpu 1: rip=0xffffffff815d1710 if=0\n", "0xffffffff815d1710 svm_vcpu_enter_exit\n"},
		{"idle", "  vcpu 0: rip=0xffffffff815d1804 rflags=0x246\n", ""},
		{"a guest kernel's oops", "  vcpu 0: rip=0xffffffff810ab15e rflags=0x10002 if=0\n", "0xffffffff810ab15e page_fault_oops\n"},
		{"a guest's page fault", "  vcpu 0: rip=0xffffffff810ab210 if=1\n", ""},
		{"after data", "  vcpu 0: rip=0xffffffff815d1904\n", ""},
		{"below every symbol", "  vcpu 0: rip=0x100281\n", ""},
		{"no dump", "--- FAIL: TestX (1.00s)\n", ""},
		// The daemon's log of a given-up machine (test/e2b/run.sh): the
		// VMM's log quoted in one line, its newlines escaped.
		// A paused VMM's log line (vmmproc's waitConsole pauses a
		// machine whose console it gave up on).
		{"a pause's log line", `time=2026-12-03T12:40:01.000Z level=INFO msg="vcpu: paused" vcpu=1 rip=0xffffffff815d1720 rflags=0x46 exits=812` + "\n", "0xffffffff815d1720 svm_vcpu_enter_exit\n"},
		{"a pause's log line, in the guest", `msg="vcpu: paused" vcpu=0 rip=0xffffffff815d1804 rflags=0x246 exits=9` + "\n", ""},
		{"in a daemon's log line", `time=2026-12-03T09:20:02.780Z level=WARN msg="restore: the restored guest never served" vmmlog="virtio: ...\n  vcpu 0: rip=0xffffffff815d159c rflags=0x10246 if=1\n"` + "\n", "0xffffffff815d159c __svm_vcpu_run\n"},
	} {
		out, ok := run(tc.dump)
		if out != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: labsvmrips = %q, ok %v; want %q", tc.name, out, ok, tc.want)
		}
	}
}

// TestLabPerCPU: faults.sh's labpercpu matches the dump's line of a vCPU
// whose kernel runs on a wrong per-CPU base (vmm/percpu.go's
// describeGS), in a test's output and quoted in a daemon's log line,
// and not the lines of a vCPU on its own base or one not known.
func TestLabPerCPU(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       bool
	}{
		{"slipped", "    gs: cpl=0 base=0x0 kernel_gs_base=0xffff88800fa00000 cr2=0x0 cr3=0x2a0c000 per-CPU base slipped: the kernel's base 0x0, its per-CPU area 0xffff88800fa00000", true},
		{"in a daemon's log", `level=WARN msg="sandbox's guest stopped answering" dump="vcpu 0: rip=0xffffffff815dab53\n    gs: cpl=0 base=0x7f00 kernel_gs_base=0x0 cr2=0x0 cr3=0x1 per-CPU base slipped: the kernel's base 0x7f00, its per-CPU area 0xffff88800fa00000\n"`, true},
		{"a foreign CR3", "    root: cpl=0 cr3=0x18841b000 CR3 outside guest RAM: not the guest state", true},
		{"its own base", "    gs: cpl=0 base=0xffff88800fa00000 kernel_gs_base=0x0 cr2=0x0 cr3=0x1 per-cpu=0xffff88800fa00000 ok", false},
		{"not known", "    gs: cpl=0 base=0xffff88800fa00000 kernel_gs_base=0x0 cr2=0x0 cr3=0x1 per-cpu=unknown", false},
		{"another line", "per-CPU base slipped, said elsewhere", false},
	} {
		cmd := exec.Command("bash", "-c", `. ./faults.sh; grep -q -E "$labpercpu"`)
		cmd.Stdin = strings.NewReader(tc.line + "\n")
		err := cmd.Run()
		if _, exit := err.(*exec.ExitError); err != nil && !exit {
			t.Fatal(err)
		}
		if got := err == nil; got != tc.want {
			t.Errorf("%s: labpercpu matches %v, want %v", tc.name, got, tc.want)
		}
	}
}
