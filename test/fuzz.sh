#!/bin/sh
# test/fuzz.sh FUZZTIME PKG:Target... runs each fuzz target for FUZZTIME
# with one worker per core, prints its output without the progress lines
# and exits 1 if any target failed.
#
# Go 1.26's fuzz coordinator can fail a target that found nothing, with a
# bare "context deadline exceeded", when -fuzztime ends while a worker is
# busy (go.dev/issue/75804, fixed in Go 1.27); on a loaded machine this
# happens. A real finding always writes a reproducer ("Failing input
# written to testdata/fuzz/...") or fails a seed, so only a failure whose
# whole message is that line, with nothing written, runs the target once
# more; its second verdict is final.
set -u
fuzztime=$1
shift
rc=0
for t in "$@"; do
	pkg=${t%%:*} fn=${t#*:}
	for try in 1 2; do
		echo "go test -run '^$fn\$' -fuzz '^$fn\$' -fuzztime $fuzztime $pkg"
		out=$(${GO:-go} test -run "^$fn\$" -fuzz "^$fn\$" -fuzztime "$fuzztime" "$pkg" 2>&1)
		st=$?
		echo "$out" | grep -v '^fuzz: elapsed: [0-9]*s, execs'
		if echo "$out" | grep -q 'no fuzz tests to fuzz'; then
			echo "test/fuzz.sh: no $fn in $pkg"
			st=1
			break
		fi
		[ $st = 0 ] && break
		# The coordinator's race: the FAIL line, then only the deadline.
		if [ $try = 1 ] && ! echo "$out" | grep -q 'Failing input written\|panic:\|_test.go:[0-9]' &&
			echo "$out" | grep -A1 -- "^--- FAIL: $fn " | tail -n1 | grep -q '^    context deadline exceeded$'; then
			echo "test/fuzz.sh: $fn failed with only the -fuzztime deadline, nothing found (go.dev/issue/75804); once more"
			continue
		fi
		break
	done
	[ $st = 0 ] || rc=1
done
exit $rc
