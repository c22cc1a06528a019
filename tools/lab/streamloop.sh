#!/bin/sh
# streamloop.sh: the reproducer of nested guests' silent resets (docs/lab.md
# "QEMU"). Inside the lab, N sandboxes in turn: new (a template restore),
# exec echo, a 10 MiB stream from the guest through exec, kill. Prints each
# failure with the VMM's triple-fault line and a RESULT line.
#
#	bin/sandfs lab -- sh -c 'N=30 sh /opt/sandfs/tools/lab/streamloop.sh'
N=${N:-20}
B=/opt/sandfs/bin/sandfs
st=/tmp/streamloop
$B serve --state $st --mount= --listen unix:/run/sandfs/sandfs.sock >/tmp/streamloop.log 2>&1 &
for _ in $(seq 60); do [ -S /run/sandfs/sandfs.sock ] && break; sleep 1; done
ok=0
bad=0
for i in $(seq "$N"); do
	id=$($B new 2>&1) || { echo "$i: new failed: $id"; bad=$((bad + 1)); continue; }
	out=$($B exec "$id" -- echo up 2>&1)
	n=$($B exec "$id" -- head -c 10485760 /dev/zero 2>&1 | wc -c)
	if [ "$out" = up ] && [ "$n" = 10485760 ]; then
		ok=$((ok + 1))
	else
		bad=$((bad + 1))
		echo "$i: $id: echo gave '$out', the stream $n bytes of 10485760"
		grep -h "triple" $st/run/"$id"/vmm.log
	fi
	$B kill "$id" >/dev/null 2>&1
	echo "[streamloop] $i of $N: ok=$ok bad=$bad" >&2
done
echo "RESULT ok=$ok bad=$bad"
grep -i "triple\|ended unasked" /tmp/streamloop.log | cut -c1-300
