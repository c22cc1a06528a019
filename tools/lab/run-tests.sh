#!/bin/bash
# Runs inside the lab (see test-lab.sh): each line of the manifest is
# "<binary> <package dir>"; binaries live next to the manifest (an
# absolute path), package dirs under $SANDFS_TEST_ROOT (/opt/sandfs, the
# repository as the lab mounts it). make test-unit runs it on the host too,
# for test/makerun, whose tests start labs of their own: there
# SANDFS_TEST_ROOT is the repository, SANDFS_TEST_STAGE "host" and
# SANDFS_TEST_DIGEST the digest's file.
#
# A nested guest that the emulation resets, or whose vCPU the emulation
# left in the lab kernel's own SVM code (tools/lab/faults.sh), fails
# whatever test it belonged to; so, on the host, does the crash of the lab
# a test started itself, its console in the test's output. When a binary fails and each failed
# top-level test's own output shows one of those signatures, those tests
# (at most maxRerun) run once more, and again (at most maxAttempts reruns)
# while each failure shows a signature; the binary passes only if they all
# pass in the end. Every rerun is printed as a "lab rerun:" line and
# collected in the digest at the end. A failure without a signature, or a
# failure of the last rerun, is final; when that failure too showed a
# lab fault, a line "lab fault, final: BINARY DIR TESTS" says so, and
# test-lab.sh runs those tests once more in a new lab boot (the faults
# come in spells: a CI run's lab faulted one test three times running).
# A manifest line may name the tests to run as a third field
# ("TestA|TestB"), as test-lab.sh's does for that boot.
manifest=$1
bindir=$(dirname "$manifest")
maxRerun=4
# maxAttempts: reruns of a test whose every failure shows a lab fault.
maxAttempts=2
. "$(dirname "$0")/faults.sh"
root=${SANDFS_TEST_ROOT:-/opt/sandfs}
stage=${SANDFS_TEST_STAGE:-lab}
digest=${SANDFS_TEST_DIGEST:-/tmp/lab-digest}
: > "$digest"

# A binary that goes quiet: test-lab.sh takes a lab that prints nothing for
# its SANDFS_LAB_SILENCE (900 s) as hung and ends it, which used to leave
# no record of where anything stood. So after $quiet seconds without a new
# line from the binary, every user task's state, wait channel and kernel
# stack are written, once per quiet spell, to $console: in the lab its
# serial console, which the host keeps in the lab's console log and which
# test-lab.sh prints when it ends a hung lab. Not to the output, whose
# silence test-lab.sh goes on timing: a hung lab costs no longer. No dump
# at all says the lab's own kernel had stopped.
quiet=${SANDFS_LAB_WATCH:-600}
console=${SANDFS_LAB_CONSOLE:-/dev/console}
# On the host (test/makerun) the console is not ours: a file beside the digest.
[ "$stage" = lab ] || console=${SANDFS_LAB_CONSOLE:-$digest.watchdog}

# tasks: every user process's tasks as the kernel sees them.
tasks() {
	local p t c
	for p in /proc/[0-9]*; do
		c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null | cut -c1-160)
		[ -n "$c" ] || continue # a kernel thread (or gone)
		echo "lab watchdog: pid ${p#/proc/}: $c"
		for t in "$p"/task/[0-9]*; do
			echo "lab watchdog:   task ${t##*/} state=$(sed -n 's/^State:[[:space:]]*//p' "$t/status" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
			sed 's/^/lab watchdog:     /' "$t/stack" 2>/dev/null
		done
	done
}

# watch LOG: while a binary writes LOG (run in the background, killed
# after), dump the tasks to $console once per quiet spell of LOG.
watch() {
	local log=$1 said=0 idle step=30
	[ "$quiet" -lt 60 ] && step=1
	while sleep $step; do
		idle=$(($(date +%s) - $(stat -c %Y "$log" 2>/dev/null || date +%s)))
		if [ $idle -lt "$quiet" ]; then
			said=0
		elif [ $said = 0 ]; then
			said=1
			{
				echo "lab watchdog: $log has had no new line for ${idle}s; every user task's state, wait channel and kernel stack:"
				tasks
				echo "lab watchdog: end of the dump"
			} > "$console" 2>&1
		fi
	done
}

# runbin DIR BIN LOG ARGS...: run one test binary, output to stdout and LOG.
runbin() {
	local dir=$1 bin=$2 log=$3 w rc
	shift 3
	: > "$log"
	# Its own streams: a sleep it leaves behind must not hold the output.
	watch "$log" </dev/null >/dev/null 2>&1 &
	w=$!
	(cd "$root/$dir" && "$bin" -test.v -test.timeout="${SANDFS_LAB_TEST_TIMEOUT:-30m}" "$@" 2>&1) | tee "$log"
	rc=${PIPESTATUS[0]}
	kill $w 2>/dev/null
	wait $w 2>/dev/null
	return "$rc"
}

# section LOG TEST: the lines of LOG from TEST's start to its verdict.
section() {
	awk -v t="$2" '$0 == "=== RUN   " t {on = 1} on {print} on && index($0, "--- FAIL: " t " ") == 1 {exit}' "$1"
}

# failures LOG: the top-level tests that failed.
failures() {
	sed -n 's/^--- FAIL: \(Test[A-Za-z0-9_]*\) .*/\1/p' "$1" | sort -u
}

# note DIR TESTS LOG: the digest's lines for failed TESTS of DIR: each
# test's last few messages, without the harnesses' clean-up dumps (the
# daemon's log, consoles, VMM and agent state), which follow the failure.
note() {
	local dir=$1 tests=$2 log=$3 t
	for t in $tests; do
		echo "FAIL	sandfs/$dir	$t" >> "$digest"
		section "$log" "$t" | grep -E '^ +[A-Za-z0-9_]+\.go:[0-9]+: ' |
			grep -v -E 'serve log( \(tail\))?:$|\(tail\):$|sandbox [^ ]+ status: |virtio state of [0-9]+ VMMs|agent goroutines asked for' | tail -n 5 | cut -c1-400 >> "$digest"
		# From the VMMs' SIGUSR1 dumps: devices with an unacknowledged
		# interrupt and where interrupts stand (a guest that stopped
		# taking them; vmm/irqdebug.go).
		section "$log" "$t" | grep -E 'virtio id=[0-9]+ .* intStatus=0x[1-3] |^ +vcpu [0-9]+: rip=|^ +(gs|root): cpl=|^ +lapic: tpr=|^ +ioapic: irr=|^ +pin [0-9]+: vector=' |
			head -n 28 | sed 's/^ */	dump: /' | cut -c1-300 >> "$digest"
	done
}

fail=0
while read -r name dir only; do
	[ -n "$name" ] || continue
	echo "=== $stage: $dir ($name${only:+: $only})"
	log=/tmp/lab-test-$name.log
	t0=$(date +%s)
	if [ -n "$only" ]; then
		runbin "$dir" "$bindir/$name" "$log" -test.run "^($only)\$"
	else
		runbin "$dir" "$bindir/$name" "$log"
	fi
	rc=$?
	how=""
	cur=$log
	for attempt in $(seq 0 $maxAttempts); do
		[ $rc != 0 ] || break
		tests=$(failures "$cur")
		n=$(echo "$tests" | grep -c .)
		faulted=1
		why=""
		for t in $tests; do
			sec=$(section "$cur" "$t")
			if resets=$(grep -m 2 -E "$labreset" <<< "$sec"); then
				why="$why$(cut -c1-300 <<< "$resets")"$'\n'
			elif rips=$(labsvmrips <<< "$sec"); then
				why="$why$t: a vCPU in the lab kernel's SVM code or a guest kernel's oops: $(echo $rips)"$'\n'
			elif slip=$(grep -m 1 -F "$labslip" <<< "$sec"); then
				why="$why$t: a nested guest's kernel ran on a wrong per-CPU base: $(echo $slip | cut -c1-200)"$'\n'
			elif slip=$(grep -m 1 -E "$labpercpu" <<< "$sec"); then
				why="$why$t: a VMM's dump shows a vCPU off its guest's own state (a wrong per-CPU base or paging root): $(echo $slip | cut -c1-240)"$'\n'
			elif [ "$stage" = host ] && crash=$(grep -m 2 -E "$labcrash" <<< "$sec"); then
				# On the host, a test's output holds the console of the
				# lab it started (test/makerun): that lab's kernel died.
				why="$why$t: its lab's kernel crashed: $(echo $crash | cut -c1-200)"$'\n'
			elif [ "$stage" = host ] && grep -q -F "$labgone" <<< "$sec"; then
				# ... or reset silently: its QEMU exited under it.
				why="$why$t: its lab's QEMU exited before the command ended (a silent reset of the lab's kernel)"$'\n'
			else
				faulted=0
			fi
		done
		if [ "$n" -ge 1 ] && [ "$n" -le $maxRerun ] && [ $faulted = 1 ] && [ "$attempt" -lt $maxAttempts ]; then
			list=$(echo $tests | tr ' ' '|')
			echo "lab rerun: sandfs/$dir: $list failed with a fault of the lab's nested emulation in their output (docs/lab.md); once more (rerun $((attempt + 1)) of at most $maxAttempts):"
			printf '%s' "$why"
			echo "lab rerun: sandfs/$dir	$list	rerun $((attempt + 1)) after a lab fault:" >> "$digest"
			printf '%s' "$why" | sed 's/^/	why: /' >> "$digest"
			cur=$log.rerun$((attempt + 1))
			runbin "$dir" "$bindir/$name" "$cur" -test.run "^($list)\$"
			rc=$?
			if [ $rc = 0 ]; then
				how=", $list passed on rerun after a lab fault"
				echo "lab rerun: sandfs/$dir	$list	passed on rerun $((attempt + 1))" >> "$digest"
			fi
		elif [ "$n" = 0 ]; then
			echo "FAIL	sandfs/$dir	no test verdict (exit $rc: a panic or the timeout); the output's end:" >> "$digest"
			tail -n 6 "$cur" | cut -c1-400 >> "$digest"
			break
		else
			note "$dir" "$tests" "$cur"
			if [ $faulted = 1 ] && [ "$n" -ge 1 ] && [ "$n" -le $maxRerun ]; then
				echo "lab fault, final: $name $dir $(echo $tests | tr ' ' '|')"
			fi
			break
		fi
	done
	t=$(($(date +%s) - t0))
	if [ $rc = 0 ]; then
		echo "ok  	sandfs/$dir	${t}s	($stage$how)"
	else
		echo "FAIL	sandfs/$dir	${t}s	($stage, exit $rc)"
		fail=1
	fi
done < "$manifest"
if [ -s "$digest" ]; then
	echo "=== $stage digest"
	cat "$digest"
	echo "=== end of $stage digest"
fi
if [ $fail = 0 ]; then echo "PASS ($stage)"; else echo "FAIL ($stage)"; fi
exit $fail
