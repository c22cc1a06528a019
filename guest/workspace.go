package guest

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// Workspace is where the agent mounts the sandbox's world.
const Workspace = "/workspace"

// MountWorkspace connects to the host's vsock port (the daemon serves
// the sandbox's world there, 9P2000.L) and mounts it at Workspace with
// the kernel's 9p client over that connection (trans=fd). The kernel
// holds the connection; the agent's descriptor is closed. A mount
// already at Workspace (its connection ended with a restore from a
// snapshot or a daemon restart) is detached first: processes inside it
// keep the dead one (EIO), new lookups reach the new one.
func MountWorkspace(port uint32) error {
	for range maxStacked {
		if err := unix.Unmount(Workspace, unix.MNT_DETACH); err != nil {
			break // EINVAL: nothing mounted there (any other error: the mount below says)
		}
	}
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return msg.Errorf(errnoOf(err), "workspace: socket: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_HOST, Port: port}); err != nil {
		return msg.Errorf(errnoOf(err), "workspace: connect to host port %d: %v", port, err)
	}
	if err := os.MkdirAll(Workspace, 0o755); err != nil {
		return msg.Errorf(syscall.EIO, "workspace: %v", err)
	}
	opts := fmt.Sprintf("trans=fd,rfdno=%d,wfdno=%d,version=9p2000.L,msize=%d,access=any,cache=none", fd, fd, 512<<10)
	if err := unix.Mount("sandfs-world", Workspace, "9p", 0, opts); err != nil {
		return msg.Errorf(errnoOf(err), "workspace: mount 9p: %v", err)
	}
	return nil
}

// maxStacked bounds the mounts MountWorkspace detaches at Workspace.
const maxStacked = 16

func errnoOf(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}
