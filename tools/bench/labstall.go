package bench

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The lab's stall of a restored guest (docs/lab.md, "The dump of a
// stall"): QEMU's emulation of nested SVM leaves the lab kernel's own
// VMRUN path as the guest's RIP, and the guest page-faults there for
// good. Sandbox guests are never offered SVM and run the lab's kernel
// image, so a dumped vCPU RIP inside the lab kernel's SVM code (or in
// page_fault_oops: a guest kernel stopped on the lab's fault before it
// printed) is the lab's, as tools/lab/faults.sh's labsvmrips decides for
// the test stage. The daemon logs such a guest's dump when it gives up
// on it ("the restored guest never served", with the VMM's dump).

// dumpRIP finds "vcpu N: rip=0x..." in a VMM's dump (vmm/irqdebug.go).
var dumpRIP = regexp.MustCompile(`vcpu [0-9]+: rip=0x([0-9a-f]+)`)

// labStallIn reports the first dumped vCPU RIP in log (the daemon's log)
// that kallsyms (the lab's /proc/kallsyms, in its format) places in SVM
// code or page_fault_oops, as "0x<rip> <symbol>".
func labStallIn(log []byte, kallsyms string) (string, bool) {
	var rips []uint64
	for _, m := range dumpRIP.FindAllSubmatch(log, -1) {
		if v, err := strconv.ParseUint(string(m[1]), 16, 64); err == nil {
			rips = append(rips, v)
		}
	}
	if len(rips) == 0 {
		return "", false
	}
	f, err := os.Open(kallsyms)
	if err != nil {
		return "", false
	}
	defer f.Close()
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || (fs[1] != "t" && fs[1] != "T") {
			continue
		}
		if a, err := strconv.ParseUint(fs[0], 16, 64); err == nil && a != 0 {
			syms = append(syms, sym{a, fs[2]})
		}
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	for _, rip := range rips {
		i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > rip }) - 1
		if i < 0 {
			continue
		}
		if n := syms[i].name; strings.Contains(n, "svm") || n == "page_fault_oops" {
			return fmt.Sprintf("%#x %s", rip, n), true
		}
	}
	return "", false
}
