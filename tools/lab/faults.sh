# tools/lab/faults.sh: how the harnesses tell the lab's own faults from a
# test's failure (docs/lab.md "Nested guests' resets", "QEMU"). Sourced by
# tools/lab/test-lab.sh, tools/lab/run-tests.sh and test/e2b/run.sh.

# labcrash: what the lab's own kernel prints on its console when it dies
# (an oops in generic code, a BUG, a panic, a double fault).
labcrash='Oops:|BUG: |Kernel panic|double fault'

# labgone: what `sandfs lab` says when the lab's QEMU exited before the
# command reported its status (tools/lab/lab.go): the lab's own kernel
# reset silently (QEMU runs with -no-reboot) or QEMU died. Not said for
# a lab ended by its caller or its -timeout (those name the context).
labgone='sandfs lab: guest exited without reporting a status: qemu exited'

# labreset: what our VMM logs when a nested guest reset itself
# (KVM_EXIT_SHUTDOWN: a triple fault) and what the daemon reports for
# such a machine.
labreset='triple fault, the guest resets|machine has ended \(reset\)|guest shut down \(reset\)'

# labslip: what a nested guest's kernel prints when it ran with a per-CPU
# (GS) base the emulation left wrong across VMRUN/#VMEXIT: its fault
# handler reads the current task at that base, finds NULL and faults on
# the task's field at offset 0x398 (docs/lab.md "QEMU"), as the lab's own
# kernel does in its double faults (R12 0x398, CR2 on its stack). The
# guest runs the lab's kernel image, so the address is that kernel's.
labslip='BUG: kernel NULL pointer dereference, address: 0000000000000398'

# labpercpu: what a VMM's dump (vmm/percpu.go) says of a vCPU whose
# guest kernel runs on another per-CPU base than the one it was restored
# from or saved with (labslip's wrong GS base, caught by the dump where
# the guest stalls before its console says anything), or whose paging
# root lies outside its guest's RAM (the lab kernel's own CR3, with its
# RIP and RSP, left in the guest by the emulation: the SVM stall's
# state, whatever RIP it shows).
labpercpu='(gs|root): cpl=.* (per-CPU base slipped|not the guest state)'

# labsvmrips: reads VMM dumps (vmm/irqdebug.go, "vcpu N: rip=0x...") and
# the VMM's log lines of a pause (vmm/vcpu.go, "vcpu=N rip=0x...", which
# vmmproc's lab tests print when a console wait gives up) on stdin and
# prints "<rip> <symbol>" for each vCPU RIP that lies in SVM code of the
# running kernel; it succeeds if there is one. Sandbox guests
# are never offered SVM (vmm/cpuid.go) and run the same kernel image as
# the lab, so such a RIP is not the guest's: it is the lab kernel's own
# VMRUN path, its state leaked into the nested guest by QEMU's emulation
# of nested SVM (docs/lab.md, "The dump of a stall"). Only inside the
# lab, where /proc/kallsyms is that kernel's ($LAB_KALLSYMS: another
# file in its format, for tools/lab's TestLabSVMRips). It names as well
# a RIP in page_fault_oops: a nested guest's kernel that faulted in
# kernel mode and stopped there before its console said so (a CI run of
# 2026-12-04: two of TestNetworkMany's restored guests reset, and in its
# rerun two others sat in page_fault_oops with interrupts off and
# nothing on their consoles: labslip's fault, caught before it prints).
labsvmrips() {
	local rips syms=${LAB_KALLSYMS:-/proc/kallsyms}
	rips=$(grep -o -E 'vcpu( [0-9]+:|=[0-9]+) rip=0x[0-9a-f]+' | sed 's/.*rip=0x//' | sort -u)
	[ -n "$rips" ] && [ -r "$syms" ] || return 1
	# Kernel addresses are 16 hex digits: sorted as text, the RIPs fall
	# after the symbol that holds them.
	{ awk '$2 ~ /^[tT]$/ {print $1, $3}' "$syms"
	  for r in $rips; do echo "$(printf '%16s' "$r" | tr ' ' 0) ~"; done
	} | LC_ALL=C sort | awk '
		$2 != "~" {sym = $2; next}
		sym ~ /svm/ || sym == "page_fault_oops" {print "0x" $1, sym; found = 1}
		END {exit !found}'
}
