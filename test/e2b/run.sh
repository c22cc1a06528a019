#!/usr/bin/env bash
# test/e2b/run.sh: the E2B SDK suite (*.test.mjs, node's test runner) with
# the real `e2b` package from npm against a live sandfs serve --e2b: in
# the lab where this host cannot run guests (its port forwarded to
# 127.0.0.1:$SANDFS_E2B_PORT, default 3000), else natively. The npm
# packages (package-lock.json) are installed with `npm ci` into
# ${SANDFS_CACHE:-/var/cache/sandfs}/npm, once per lock file. Exit status:
# the suite's; 1 if the service never answered.
#
# `run.sh bench` runs the benchmark instead (make bench-e2b): bench.mjs
# through the SDK and treebench through the tree (9P, forwarded to
# 127.0.0.1:$SANDFS_E2B_9P_PORT, default 5641) against the same daemon,
# and prints each operation's median and the ratio SDK/tree.
set -euo pipefail
mode=${1:-test}
cd "$(dirname "$0")/../.."
. tools/lab/faults.sh
port=${SANDFS_E2B_PORT:-3000}
cache=${SANDFS_CACHE:-/var/cache/sandfs}/npm
key=e2b_test_$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
p9port=${SANDFS_E2B_9P_PORT:-5641}
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
say() { printf '== test/e2b: %s\n' "$*"; }

command -v node >/dev/null && command -v npm >/dev/null || { echo "test/e2b: node and npm are needed (apt-get install nodejs npm)" >&2; exit 1; }
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 18) ? 0 : 1)' ||
	{ echo "test/e2b: the e2b SDK needs Node.js >= 20.18; this is $(node --version)" >&2; exit 1; }
sum=$(cat test/e2b/package.json test/e2b/package-lock.json | sha256sum | cut -c1-16)
dir=$cache/e2b-$sum
if [ ! -d "$dir/node_modules" ]; then
	say "npm ci into $dir"
	rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
	cp test/e2b/package.json test/e2b/package-lock.json "$dir.tmp/"
	(cd "$dir.tmp" && npm ci --no-audit --no-fund --cache "$cache/.npm")
	rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
rm -f "$dir"/*.mjs
cp test/e2b/*.mjs "$dir/"

tmp=$(mktemp -d)
native=0
bin/sandfs probe -q && native=1
# serve starts the daemon ($pid; its output, the lab's console among it,
# in $tmp/serve.log).
serve() {
	if [ $native = 1 ]; then
		say "sandfs serve --e2b 127.0.0.1:$port (natively)"
		SANDFS_E2B_KEY=$key SANDFS_TOKEN=$token bin/sandfs serve --state "$tmp/state" --mount= --listen "unix:$tmp/sock" \
			--listen "tcp:127.0.0.1:$p9port" --e2b "127.0.0.1:$port" >"$tmp/serve.log" 2>&1 &
	else
		say "sandfs serve --e2b in the lab, 127.0.0.1:$port forwarded"
		bin/sandfs lab -p "$port:3000" -p "$p9port:5640" -e "SANDFS_E2B_KEY=$key" -e "SANDFS_TOKEN=$token" -e SANDFS_VIRTIO_DEBUG=1 -timeout 45m -- \
			/opt/sandfs/bin/sandfs serve --state /tmp/state --mount= --listen unix:/tmp/sandfs.sock \
			--listen tcp:0.0.0.0:5640 --e2b 0.0.0.0:3000 >"$tmp/serve.log" 2>&1 &
	fi
	pid=$!
}
unserve() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
stop() {
	unserve
	rm -rf "$tmp"
}
trap stop EXIT

# Wait for the service (an answer to GET /v2/sandboxes with the key), not
# the port: the lab's forward accepts before the daemon listens.
export E2B_API_URL=http://127.0.0.1:$port E2B_SANDBOX_URL=http://127.0.0.1:$port E2B_API_KEY=$key
waitup() {
	for _ in $(seq 240); do
		if ! kill -0 "$pid" 2>/dev/null; then break; fi
		if node -e 'fetch(process.env.E2B_API_URL + "/v2/sandboxes", {headers: {"X-API-KEY": process.env.E2B_API_KEY}})
			.then(r => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))' 2>/dev/null; then
			return 0
		fi
		sleep 1
	done
	echo "test/e2b: the E2B service never answered on 127.0.0.1:$port; its log:" >&2
	cat "$tmp/serve.log" >&2
	return 1
}

# labcrashed: the lab's own kernel died under the daemon (an oops or a
# double fault of Linux under QEMU's TCG, docs/lab.md "QEMU"), which
# fails whatever ran in it: tools/lab/faults.sh's signature.
labcrashed() {
	[ $native = 0 ] && grep -a -q -E "$labcrash" "$tmp/serve.log"
}

# labreset: a sandbox's guest that the lab's nested emulation reset (a
# triple fault, as lab tests meet it: docs/lab.md "When a nested guest
# resets"), which fails the test that drove it: the same file's
# signature, in the daemon's log.
labreset() {
	[ $native = 0 ] && grep -a -q -E "$labreset" "$tmp/serve.log"
}

# labstalled: a restored guest that never served, whose VMM's dump (the
# daemon logs a given-up machine's last words; its VMMs dump on SIGUSR1:
# SANDFS_VIRTIO_DEBUG above) shows a vCPU in the lab kernel's SVM code:
# the lab's nested emulation, as lab tests meet it (docs/lab.md "The
# dump of a stall"), or its vCPU off its guest's own state: a wrong
# per-CPU base or paging root (labpercpu). The RIPs are resolved with the lab kernel's System.map
# (tools/kernel/build.sh puts it beside build/vmlinuz).
labstalled() {
	[ $native = 0 ] && { grep -a -q -E "$labpercpu" "$tmp/serve.log" || { [ -r build/System.map ] &&
		LAB_KALLSYMS=build/System.map labsvmrips <"$tmp/serve.log" >/dev/null; }; }
}

serve
waitup || exit 1
if [ "$mode" = bench ]; then
	say "service up; benchmark (BENCH_N=${BENCH_N:-5} rounds each)"
	printf '%s\n' "$token" >"$tmp/token"
	go build -o "$tmp/treebench" ./test/e2b/treebench
	"$tmp/treebench" -addr "tcp:127.0.0.1:$p9port" -token-file "$tmp/token" -n "${BENCH_N:-5}" >"$tmp/tree.txt"
	(cd "$dir" && node bench.mjs) >"$tmp/sdk.txt"
	printf '| operation | SDK (ms) | tree (ms) | SDK / tree |\n|---|---|---|---|\n'
	join <(sort -k2 "$tmp/sdk.txt" | awk '{print $2, $3}') <(sort -k2 "$tmp/tree.txt" | awk '{print $2, $3}') |
		awk '{printf "| %s | %.1f | %.1f | %.2f |\n", $1, $2, $3, $2 / $3}'
	exit 0
fi
say "service up; running the suite"
rc=0
# The timeouts are a safety net, not a measure: node's applies to each
# test file as a whole too, and in a lab shared by several engineers a
# file of six command tests took over 300 s (2026-12-01, load 14 on 2 cores).
# SANDFS_E2B_TESTS (a shell pattern, e.g. files) runs only those files.
suite() { (cd "$dir" && node --test --test-concurrency=1 --test-timeout=900000 ${SANDFS_E2B_TESTS:-*}.test.mjs); }
suite || rc=$?
# A suite that the lab's own crash, a nested guest's reset or its stall
# failed runs again, in a new lab boot, at most twice (as test-lab.sh and
# run-tests.sh do for the lab tests); any other failure is final.
for rerun in 1 2; do
	[ $rc != 0 ] && { labcrashed || labreset || labstalled; } || break
	if labcrashed; then
		echo "test/e2b: THE LAB'S OWN KERNEL CRASHED during the suite; it runs again in a new lab boot (rerun $rerun of at most 2):"
		grep -a -m 6 -E 'BUG: |Oops:|RIP: |double fault' "$tmp/serve.log" || true
	elif labstalled; then
		echo "test/e2b: a restored guest stalled with a vCPU in the lab kernel's SVM code or off its own state during the suite; it runs again in a new lab boot (rerun $rerun of at most 2):"
		LAB_KALLSYMS=build/System.map labsvmrips <"$tmp/serve.log" || true
		grep -a -m 3 -E "$labpercpu" "$tmp/serve.log" | cut -c1-300 || true
	else
		echo "test/e2b: a sandbox's guest was reset by the lab's nested emulation during the suite; it runs again in a new lab boot (rerun $rerun of at most 2):"
		grep -a -m 3 -E "$labreset" "$tmp/serve.log" | cut -c1-300 || true
	fi
	unserve
	serve
	waitup || exit 1
	say "service up again; running the suite (rerun $rerun)"
	rc=0
	suite || rc=$?
done
if [ $rc != 0 ]; then
	echo "test/e2b: the suite failed ($rc); the daemon's log:" >&2
	cat "$tmp/serve.log" >&2
fi
exit $rc
