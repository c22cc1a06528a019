#!/bin/busybox sh
# PID 1 of the lab (development VM). Generated into the lab initramfs by
# tools/lab; /run/cmd (the command) and /run/env (its environment) are
# written next to it per run. Kernel messages go to ttyS0 (host log file);
# the command's stdout, stderr and exit status go to the virtio-serial
# ports named sandfs.stdout, sandfs.stderr and sandfs.status.
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm /dev/net
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=1777 tmp /tmp
mkdir -p /opt/sandfs /var/run /var/tmp
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 sandfs /opt/sandfs; then
	echo "lab-init: mount 9p /opt/sandfs failed" >/dev/console
fi
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
[ -e /dev/net/tun ] || mknod /dev/net/tun c 10 200
[ -e /dev/fuse ] || mknod /dev/fuse c 10 229
ln -sf /proc/self/fd /dev/fd

# cgroup v2: delegate every controller to children.
for c in $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null); do
	echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
done

hostname sandfs-lab
echo "127.0.0.1 localhost sandfs-lab" > /etc/hosts
echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd
echo "root:x:0:" > /etc/group
echo "nameserver 10.0.2.3" > /etc/resolv.conf
ip link set lo up
if [ -e /sys/class/net/eth0 ]; then
	ip link set eth0 up
	ip addr add 10.0.2.15/24 dev eth0
	ip route add default via 10.0.2.2
fi
echo 1 > /proc/sys/net/ipv4/ip_forward

in=/dev/null; out=/dev/null; err=/dev/console; status=/dev/console
for p in /sys/class/virtio-ports/*; do
	[ -e "$p/name" ] || continue
	case $(cat "$p/name") in
	sandfs.stdout) out=/dev/${p##*/} ;;
	sandfs.stderr) err=/dev/${p##*/} ;;
	sandfs.status) status=/dev/${p##*/} ;;
	sandfs.stdin) in=/dev/${p##*/} ;;
	esac
done

read up _ < /proc/uptime
echo "lab-init: running the command at ${up}s guest uptime" > /dev/console
. /run/env
cd "$SANDFS_LAB_DIR" 2>/dev/null || cd /opt/sandfs 2>/dev/null || cd /
/bin/sh /run/cmd <"$in" >"$out" 2>"$err"
rc=$?
read up _ < /proc/uptime
echo "lab-init: command exited $rc at ${up}s guest uptime" > /dev/console
echo "status $rc" > "$status"
cd /
umount /opt/sandfs 2>/dev/null
sync
reboot -f
