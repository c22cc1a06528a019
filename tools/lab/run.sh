#!/usr/bin/env bash
# tools/lab/run.sh (make run): start sandfs and mount its tree at /mnt/sandfs.
# Natively where the host capability probe says guests run at hardware speed;
# otherwise the daemon runs inside the lab (QEMU TCG) with its 9P port 5640
# forwarded to 127.0.0.1, and the host mounts it via FUSE.
# Either way the CLI (sandfs ls, new, exec, cp, kill) then works with no
# flags: natively through /run/sandfs/sandfs.sock, on the lab path through
# /run/sandfs/endpoint (address and token file; fs/client DefaultEndpoint),
# and the E2B adapter answers on 127.0.0.1:$SANDFS_E2B_PORT (3000; the
# lab's port forwarded) with the key in $state/e2b-key natively, or
# build/lab/e2b-key for the lab (made once), printed below (docs/e2b.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
endpoint=/run/sandfs/endpoint
mnt=${SANDFS_MOUNT:-/mnt/sandfs}
p9=${SANDFS_LAB_9P_PORT:-5640}
state=${SANDFS_STATE:-/var/lib/sandfs}
e2b=${SANDFS_E2B_PORT:-3000}
mkdir -p "$mnt"

probe=$(bin/sandfs probe)
echo "$probe"
pids=()
cleanup() {
	[ -n "${wrote_endpoint:-}" ] && rm -f "$endpoint"
	fusermount -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_port() {
	for _ in $(seq 1 600); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "make run: daemon exited" >&2; return 1; }; done
		sleep 0.5
	done
	echo "make run: port $1 did not open in 300s" >&2
	return 1
}

if bin/sandfs probe -q >/dev/null; then
	echo "== sandfs: running natively (state $state)"
	bin/sandfs serve --listen unix:/run/sandfs/sandfs.sock --listen "tcp:127.0.0.1:$p9" --state "$state" --mount "$mnt" \
		--kernel "$repo/build/vmlinuz" --templates "$repo/build/templates" --e2b "127.0.0.1:$e2b" &
	pids+=($!)
	wait_port "$p9"
	keyfile=$state/e2b-key # written by serve just after its 9P listeners
	for _ in $(seq 1 60); do [ -s "$keyfile" ] && break; sleep 0.5; done
else
	echo "== sandfs: this host cannot run guests natively, so sandfs runs INSIDE THE LAB (QEMU TCG, slower); 9P port $p9 forwarded to 127.0.0.1"
	echo "== its state (sandboxes, snapshots, templates) is on the host in ${SANDFS_LAB_STATE:-${SANDFS_CACHE:-/var/cache/sandfs}/lab/state.ext4}; Ctrl-C pauses running sandboxes to disk there"
	# The daemon's E2B key is given to it from here.
	keyfile=$repo/build/lab/e2b-key
	if [ ! -s "$keyfile" ]; then
		mkdir -p "$(dirname "$keyfile")"
		(umask 077 && echo "e2b_$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" > "$keyfile")
	fi
	bin/sandfs lab serve -p "$e2b:3000" -e "SANDFS_E2B_KEY=$(cat "$keyfile")" -- --e2b 0.0.0.0:3000 &
	pids+=($!)
	# QEMU's user-net forward accepts (and resets) connections before the
	# daemon inside listens, so retry the mount until it holds.
	echo "== waiting for the daemon inside the lab (about 10-30 s)"
	for i in $(seq 1 150); do
		kill -0 "${pids[0]}" 2>/dev/null || { echo "make run: the lab exited" >&2; exit 1; }
		bin/sandfs mount "$mnt" --addr "tcp:127.0.0.1:$p9" --token-file build/lab/token 2>/tmp/sandfs-mount.err &
		mpid=$!
		for _ in 1 2 3 4; do
			mountpoint -q "$mnt" && break 2
			kill -0 "$mpid" 2>/dev/null || break
			sleep 0.5
		done
		kill "$mpid" 2>/dev/null || true
		wait "$mpid" 2>/dev/null || true
		sleep 1
	done
	mountpoint -q "$mnt" || { echo "make run: mount failed: $(cat /tmp/sandfs-mount.err)" >&2; exit 1; }
	pids+=("$mpid")
	mkdir -p "$(dirname "$endpoint")"
	printf 'tcp:127.0.0.1:%s\n%s\n' "$p9" "$repo/build/lab/token" > "$endpoint.tmp"
	mv "$endpoint.tmp" "$endpoint"
	wrote_endpoint=1
fi
sleep 1
cat <<EOT

sandfs is up: the tree is at $mnt (9P at 127.0.0.1:$p9).
The E2B SDKs (docs/e2b.md) drive it with:
  export E2B_API_URL=http://127.0.0.1:$e2b E2B_SANDBOX_URL=http://127.0.0.1:$e2b E2B_API_KEY=$(cat "$keyfile" 2>/dev/null)
Quick start:
  ls $mnt                  # the tree: ctl clone err sandboxes/ ...
  cat $mnt/ctl             # the global verbs and their usage
  bin/sandfs new           # a sandbox (prints its id); then exec, cp, ls, kill
  less docs/filesystem.md  # the tree, file by file, with transcripts
Press Ctrl-C to stop.
EOT
wait "${pids[0]}"
