#!/usr/bin/env bash
# tools/lab/test-lab.sh: build the test binaries of the packages listed in
# test/lab-packages and run them all inside ONE lab boot (`sandfs lab`),
# each with -test.v in its package directory. Prints go-test-style
# "ok"/"FAIL" lines and exits non-zero if any binary failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CGO_ENABLED=0

list=test/lab-packages
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
trap 'rm -f "$manifest" "$manifest.rest" "$manifest.rest.new" "$out"' EXIT
runlab() {
	start=$(date +%s)
	set +e
	bin/sandfs lab -e SANDFS_LAB_TEST_TIMEOUT="${SANDFS_LAB_TEST_TIMEOUT:-30m}" ${SANDFS_LAB_FLAGS:-} -- /bin/sh /opt/sandfs/tools/lab/run-tests.sh "/opt/sandfs/$1" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	set -e
	echo "test-lab: lab exited $rc after $(($(date +%s) - start))s"
}
runlab "$manifest"

# The lab's own kernel (Linux under QEMU's TCG, running nested KVM) dies
# now and then whatever ran in it: it oopses in generic code (cgroup rstat,
# the scheduler, seccomp, a double fault in the page-fault handler), or it
# resets silently and QEMU, run with -no-reboot, exits without the
# command's status (docs/lab.md "QEMU"). That is an infrastructure failure
# that ends the boot (exit 125) with no verdict on the binaries not yet
# run. Then the binaries without a verdict (the interrupted one included)
# run again in a new boot, at most twice; a test that failed stays failed,
# and what the lab's console said is printed. Any other exit is final.
failed=0
for retry in 1 2; do
	con=$(sed -n 's/^sandfs lab: full console log //p' "$out" | tail -1)
	[ "$rc" = 125 ] && [ -n "$con" ] || break
	if grep -a -q -E 'Oops:|BUG: |Kernel panic|double fault' "$con"; then
		echo "test-lab: THE LAB'S OWN KERNEL CRASHED ($con):"
		grep -a -m 12 -E 'BUG: |Oops:|RIP: |Comm: |double fault' "$con" || true
	elif grep -q '^sandfs lab: guest exited without reporting a status: qemu exited' "$out"; then
		echo "test-lab: THE LAB'S OWN KERNEL RESET SILENTLY (QEMU exited; $con)"
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
	echo "test-lab: running the $(wc -l < "$rest") binaries without a verdict again, in a new lab boot (retry $retry of 2)"
	runlab "$rest"
done
if [ "$rc" = 0 ] && [ $failed = 1 ]; then rc=1; fi
exit $rc
