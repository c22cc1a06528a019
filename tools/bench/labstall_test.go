package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLabStallIn: a dumped RIP inside an SVM symbol (or page_fault_oops)
// of the kallsyms is the lab's stall; one in other code, a data symbol's
// range, or a log with no dump is not.
func TestLabStallIn(t *testing.T) {
	syms := filepath.Join(t.TempDir(), "kallsyms")
	if err := os.WriteFile(syms, []byte(
		"ffffffff815d1500 T __svm_vcpu_run\n"+
			"ffffffff815d1600 t svm_vcpu_enter_exit\n"+
			"ffffffff815d1700 T schedule\n"+
			"ffffffff81080000 t page_fault_oops\n"+
			"ffffffff81080400 T do_user_addr_fault\n"+
			"ffffffff82000000 D svm_data_not_code\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dump := func(rip string) []byte {
		return []byte(`level=WARN msg="new: the restored guest never served" vmmlog="...\n  vcpu 0: rip=0x` + rip + ` rflags=0x10246 if=1\n"`)
	}
	for _, c := range []struct {
		log  []byte
		want string
	}{
		{dump("ffffffff815d159c"), "0xffffffff815d159c __svm_vcpu_run"},
		{dump("ffffffff815d1650"), "0xffffffff815d1650 svm_vcpu_enter_exit"},
		{dump("ffffffff81080010"), "0xffffffff81080010 page_fault_oops"},
		{dump("ffffffff815d1710"), ""},                    // schedule
		{dump("ffffffff82000010"), ""},                    // after the last text symbol: do_user_addr_fault's range
		{dump("ffffffff80000000"), ""},                    // before every symbol
		{[]byte("agent ctl: no answer: i/o timeout"), ""}, // no dump
	} {
		got, ok := labStallIn(c.log, syms)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("labStallIn(%.60q...) = %q, %v; want %q", c.log, got, ok, c.want)
		}
	}
	if _, ok := labStallIn(dump("ffffffff815d159c"), filepath.Join(t.TempDir(), "none")); ok {
		t.Errorf("a stall found without a kallsyms")
	}
}
