#!/usr/bin/env bash
# tools/lab/test-lab.sh: build the test binaries of the packages listed in
# test/lab-packages and run them all inside ONE lab boot (`sandfs lab`),
# each with -test.v in its package directory. Prints go-test-style
# "ok"/"FAIL" lines and exits non-zero if any binary failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CGO_ENABLED=0
. tools/lab/faults.sh

list=${SANDFS_LAB_PACKAGES:-test/lab-packages} # another list: to try this script
[ -f "$list" ] || { echo "test-lab: missing $list" >&2; exit 1; }
# Others may have their own binaries in bin/tests: overwrite only ours, and
# use a manifest private to this run.
mkdir -p bin/tests
manifest=bin/tests/manifest.$$
trap 'rm -f "$manifest"' EXIT
: > "$manifest"
mod=$(go list -m)

patterns=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$list" | grep -v '^$' || true)
[ -n "$patterns" ] || { echo "test-lab: $list lists no packages"; exit 0; }
# shellcheck disable=SC2086
pkgs=$(go list -f '{{.ImportPath}} {{len .TestGoFiles}} {{len .XTestGoFiles}}' $patterns)
while read -r pkg nt nx; do
	rel=${pkg#"$mod"}; rel=${rel#/}; [ -n "$rel" ] || rel=.
	if [ "$nt" = 0 ] && [ "$nx" = 0 ]; then
		echo "?   	$pkg	[no test files]"
		continue
	fi
	name=$(echo "$rel" | tr / _).test
	echo "test-lab: go test -c -o bin/tests/$name ./$rel"
	go test -c -o "bin/tests/$name" "./$rel"
	printf '%s %s\n' "$name" "$rel" >> "$manifest"
done <<< "$pkgs"
[ -s "$manifest" ] || { echo "test-lab: no lab test binaries to run"; exit 0; }

echo "test-lab: running $(wc -l < "$manifest") test binaries in one lab boot"
# runlab runs the binaries of manifest $1 in one lab boot, its output also
# kept in $out.
out=bin/tests/lab-out.$$
trap 'rm -f "$manifest" "$manifest.rest" "$manifest.rest.new" "$manifest.faulted" "$out" "$out.hung" "$out.pid" "$out.rc" "$out.faulted" "$out.failed"' EXIT
: > "$out.faulted"
: > "$out.failed"
# A lab that prints nothing for $silence seconds is taken as hung and
# ended (below). Nothing in a test binary's -test.v output stays quiet that
# long; a hung lab's kernel, which QEMU keeps busy with no output and where
# the binaries' own -test.timeout never fires, did (2026-12-02: silent for
# 30 min in vmm/virtio/labtest, its console quiet too).
silence=${SANDFS_LAB_SILENCE:-900}
# A lab whose own kernel has crashed (its console shows $labcrash) and
# that has printed nothing for $crashSilence seconds is ended at once:
# 2026-12-02's CI waited out the full $silence after an oops that had
# killed a test binary's thread at 65 s of the lab's uptime.
crashSilence=${SANDFS_LAB_CRASH_SILENCE:-120}
runlab() {
	start=$(date +%s)
	rm -f "$out.hung" "$out.pid" "$out.rc"
	set +e
	( bin/sandfs lab -e SANDFS_LAB_TEST_TIMEOUT="${SANDFS_LAB_TEST_TIMEOUT:-30m}" ${SANDFS_LAB_FLAGS:-} -- /bin/bash /opt/sandfs/tools/lab/run-tests.sh "/opt/sandfs/$1" 2>&1 &
	  echo $! > "$out.pid"; wait $!; echo $? > "$out.rc" ) | tee "$out" &
	pipe=$!
	( while sleep 15; do
		lab=$(cat "$out.pid" 2>/dev/null) || continue
		kill -0 "$lab" 2>/dev/null || break
		idle=$(($(date +%s) - $(stat -c %Y "$out")))
		con=${SANDFS_CACHE:-/var/cache/sandfs}/lab/console-$lab.log # tools/lab/qemu.go
		if [ $idle -ge "$crashSilence" ] && [ -f "$con" ] && grep -a -q -E "$labcrash" "$con"; then
			echo "test-lab: THE LAB'S OWN KERNEL CRASHED and the lab printed nothing for ${idle}s: ended" | tee "$out.hung"
			kill -TERM "$lab"
			break
		fi
		if [ $idle -ge "$silence" ]; then
			echo "test-lab: THE LAB PRINTED NOTHING FOR ${idle}s: taken as hung and ended" | tee "$out.hung"
			kill -TERM "$lab"
			break
		fi
	done ) &
	watcher=$!
	wait $pipe
	kill $watcher 2>/dev/null
	wait $watcher 2>/dev/null
	rc=$(cat "$out.rc" 2>/dev/null || echo 125)
	set -e
	echo "test-lab: lab exited $rc after $(($(date +%s) - start))s"
	sed -n '/^=== lab digest$/,/^=== end of lab digest$/{//!p}' "$out" >> "$digest"
	# Each boot's failed binaries' directories, and the tests that the
	# lab's faults failed to the end (run-tests.sh), for the last boot.
	grep -a -P '^FAIL\tsandfs/' "$out" | cut -f2 | sed 's#^sandfs/##' >> "$out.failed" || true
	grep -a '^lab fault, final: ' "$out" | sed 's/^lab fault, final: //' >> "$out.faulted" || true
}
# The digest (failed tests with their last messages, and reruns) of every
# boot, which make test prints again at its very end.
digest=${SANDFS_LAB_DIGEST:-bin/tests/lab-digest.txt}
: > "$digest"
runlab "$manifest"

# The lab's own kernel (Linux under QEMU's TCG, running nested KVM) dies
# now and then whatever ran in it: it oopses in generic code (cgroup rstat,
# the scheduler, seccomp, a double fault in the page-fault handler), or it
# resets silently and QEMU, run with -no-reboot, exits without the
# command's status (docs/lab.md "QEMU"), or it hangs (above). That is an infrastructure failure
# that ends the boot (exit 125) with no verdict on the binaries not yet
# run. Then the binaries without a verdict (the interrupted one included)
# run again in a new boot, at most three times (twice until a CI run of
# 2026-12-03 lost its lab to two crashes in a row and a silent reset);
# a test that failed stays failed,
# and what the lab's console said is printed. Any other exit is final.
failed=0
for retry in 1 2 3; do
	con=$(sed -n 's/^sandfs lab: full console log //p' "$out" | tail -1)
	[ "$rc" = 125 ] && [ -n "$con" ] || break
	if grep -a -q -E "$labcrash" "$con"; then
		echo "test-lab: THE LAB'S OWN KERNEL CRASHED ($con):"
		grep -a -m 12 -E 'BUG: |Oops:|RIP: |Comm: |double fault' "$con" || true
	elif grep -q "^$labgone" "$out"; then
		echo "test-lab: THE LAB'S OWN KERNEL RESET SILENTLY (QEMU exited; $con)"
	elif [ -s "$out.hung" ]; then
		echo "test-lab: THE LAB HUNG (no output for ${silence}s; $con)"
		echo "lab hung: no output for ${silence}s; the binaries without a verdict run again" >> "$digest"
		# run-tests.sh's watchdog: where every task stood (docs/lab.md).
		if grep -a -q '^lab watchdog: ' "$con"; then
			echo "test-lab: what the lab's watchdog wrote to its console:"
			grep -a '^lab watchdog: ' "$con" | tr -d '\r' | head -n 600
			grep -a -m 1 '^lab watchdog: .* no new line' "$con" | tr -d '\r' | sed 's/^/	/' >> "$digest"
		else
			echo "test-lab: the lab's watchdog wrote nothing to its console: the lab's own kernel had stopped, or the silence was outside a test binary"
			echo "	the watchdog wrote nothing: the lab's own kernel had stopped, or the silence was outside a test binary" >> "$digest"
		fi
	else
		break
	fi
	grep -q -P '^FAIL\tsandfs/' "$out" && failed=1
	: > "$manifest.rest.new"
	while read -r name rel; do
		grep -q -P "^(ok  |FAIL)\tsandfs/\Q$rel\E\t" "$out" || printf '%s %s\n' "$name" "$rel" >> "$manifest.rest.new"
	done < "${rest:-$manifest}"
	rest=$manifest.rest
	mv "$manifest.rest.new" "$rest"
	echo "test-lab: running the $(wc -l < "$rest") binaries without a verdict again, in a new lab boot (retry $retry of 3)"
	runlab "$rest"
done

# The lab's faults come in spells: a CI run of 2026-12-04 had one test's
# nested guest stall once and reset twice in its three runs in one boot,
# where the same test ran eleven times of twelve clean in other boots.
# So when every binary that failed failed only by tests whose every run
# showed a lab fault (run-tests.sh's "lab fault, final:" lines), those
# tests run once more, in a new lab boot, and decide. Any other failure
# is final and no boot is spent.
if [ "$rc" != 125 ] && [ -s "$out.faulted" ]; then
	others=$(sort -u "$out.failed" | grep -v -x -F -f <(cut -d' ' -f2 "$out.faulted") || true)
	if [ -z "$others" ]; then
		echo "test-lab: every failure was a lab fault, three runs each in one boot; those tests run once more in a new lab boot:"
		sed 's/^/	/' "$out.faulted"
		echo "lab faults to the end in one boot; run once more in a new lab boot: $(cut -d' ' -f2,3 "$out.faulted" | paste -s -d';')" >> "$digest"
		mv "$out.faulted" "$manifest.faulted"
		: > "$out.faulted"
		runlab "$manifest.faulted"
		if [ "$rc" = 0 ]; then
			failed=0
			echo "lab faults: the tests passed in the new lab boot" >> "$digest"
		fi
	fi
fi
if [ "$rc" = 0 ] && [ $failed = 1 ]; then rc=1; fi
exit $rc
