package net

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// VnetHdrLen is the size of struct virtio_net_hdr_v1 (with num_buffers),
// which VIRTIO_F_VERSION_1 makes the only header layout; the tap is set to
// the same size so frames pass through unchanged.
const VnetHdrLen = 12

// OpenTap opens (creating if needed) the tap interface name as
// IFF_TAP|IFF_NO_PI|IFF_VNET_HDR with a 12-byte vnet header and no
// offloads, non-blocking so that reads wait in Go's poller. It returns the
// file and the interface's name (the kernel picks one for "tap%d").
// Needs CAP_NET_ADMIN. netpolicy will own tap creation later; this is the
// minimal helper.
func OpenTap(name string) (*os.File, string, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open tap: /dev/net/tun: %w", err)
	}
	f, ifname, err := SetupTap(fd, name)
	if err != nil {
		unix.Close(fd)
		return nil, "", err
	}
	return f, ifname, nil
}

// SetupTap attaches an open /dev/net/tun fd to tap name (TUNSETIFF) and
// configures it as OpenTap does. On success the fd belongs to the file.
func SetupTap(fd int, name string) (*os.File, string, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, "", fmt.Errorf("open tap: bad name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return nil, "", fmt.Errorf("open tap: TUNSETIFF %q: %w", name, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VnetHdrLen); err != nil {
		return nil, "", fmt.Errorf("open tap: TUNSETVNETHDRSZ %q: %w", name, err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0); err != nil {
		return nil, "", fmt.Errorf("open tap: TUNSETOFFLOAD %q: %w", name, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, "", fmt.Errorf("open tap: nonblock: %w", err)
	}
	return os.NewFile(uintptr(fd), "tap:"+ifr.Name()), ifr.Name(), nil
}
