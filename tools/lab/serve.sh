#!/bin/sh
# The command of `sandfs lab serve` inside the lab (tools/lab/serve.go):
# serve.sh SERIAL DIR SERVE-COMMAND...: mount the state disk (the
# virtio-blk drive with serial SERIAL, lab.StateSerial) at DIR
# (lab.GuestStateMount), run SERVE-COMMAND (sandfs serve ...) with its
# state in DIR/state and its tree at /run/sandfs-tree. When the host
# closes stdin (lab serve stopping), pause every running sandbox to disk,
# stop the daemon, end what it left running (the VMMs outlive it; they
# cannot outlive the lab) and unmount, so the image is clean for the next
# lab.
serial=$1
state=$2
shift 2
tree=/run/sandfs-tree
exec 3<&0 </dev/null
dev=
for b in /sys/block/vd*; do
	[ "$(cat "$b/serial" 2>/dev/null)" = "$serial" ] && dev=/dev/${b##*/}
done
if [ -z "$dev" ]; then
	echo "lab serve: no state disk (a virtio-blk drive with serial $serial)" >&2
	exit 125
fi
mkdir -p "$state" "$tree"
if ! mount -t ext4 -o discard "$dev" "$state"; then
	echo "lab serve: cannot mount the state disk $dev" >&2
	exit 125
fi
stop=
trap 'stop=1' TERM
"$@" --state "$state/state" --mount "$tree" &
pid=$!
(cat <&3 >/dev/null; kill -TERM $$) &
wait $pid
rc=$?
if [ -n "$stop" ] && kill -0 $pid 2>/dev/null; then
	for d in "$tree"/sandboxes/*; do
		[ -e "$d/status" ] || continue # none: the pattern itself
		read -r id st _ <"$d/status" 2>/dev/null || continue
		[ "$st" = running ] || continue
		if echo pause >"$d/ctl"; then
			echo "lab serve: sandbox $id paused to disk" >&2
		else
			echo "lab serve: sandbox $id not paused; it does not survive the lab" >&2
		fi
	done
	kill -TERM $pid
	wait $pid
	rc=$?
fi
kill -KILL -1 2>/dev/null
sleep 1
sync
umount "$state" || echo "lab serve: cannot unmount the state disk" >&2
exit $rc
