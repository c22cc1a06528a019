#!/bin/sh
# Runs inside the lab (see test-lab.sh): each line of the manifest is
# "<binary> <package dir>"; binaries live next to the manifest.
manifest=$1
bindir=$(dirname "$manifest")
fail=0
while read -r name dir; do
	[ -n "$name" ] || continue
	echo "=== lab: $dir ($name)"
	t0=$(date +%s)
	(cd "/opt/sandfs/$dir" && "$bindir/$name" -test.v -test.timeout=${SANDFS_LAB_TEST_TIMEOUT:-30m} 2>&1)
	rc=$?
	t=$(($(date +%s) - t0))
	if [ $rc = 0 ]; then
		echo "ok  	sandfs/$dir	${t}s	(lab)"
	else
		echo "FAIL	sandfs/$dir	${t}s	(lab, exit $rc)"
		fail=1
	fi
done < "$manifest"
if [ $fail = 0 ]; then echo "PASS (lab)"; else echo "FAIL (lab)"; fi
exit $fail
