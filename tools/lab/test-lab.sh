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
start=$(date +%s)
set +e
bin/sandfs lab -e SANDFS_LAB_TEST_TIMEOUT="${SANDFS_LAB_TEST_TIMEOUT:-10m}" ${SANDFS_LAB_FLAGS:-} -- /bin/sh /opt/sandfs/tools/lab/run-tests.sh "/opt/sandfs/$manifest"
rc=$?
set -e
echo "test-lab: lab exited $rc after $(($(date +%s) - start))s"
exit $rc
