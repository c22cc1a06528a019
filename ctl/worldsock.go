package ctl

import (
	"net"

	"golang.org/x/sys/unix"
)

// worldSendBuf is the send buffer asked for on each world connection, in
// both processes (the daemon's end here, the VMM's in vmm/virtio/p9): a
// full read's reply (500 KiB at the guest's msize) then goes into the
// socket in one write, where the default (net.core.wmem_default, about
// 208 KiB) makes writer and reader take turns, a process hand-off per
// turn.
const worldSendBuf = 2 << 20

// growSendBuffer raises c's send buffer to worldSendBuf: SO_SNDBUFFORCE
// as root, else SO_SNDBUF (capped by net.core.wmem_max). Best effort: a
// smaller buffer is only slower.
func growSendBuffer(c net.Conn) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, worldSendBuf) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, worldSendBuf)
		}
	})
}
