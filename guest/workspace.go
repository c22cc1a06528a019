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

// WorkspaceTag is the mount tag of the VMM's virtio-9p device, which
// carries 9P to the same daemon socket as a vsock connection to the
// world's port (ctl.WorldTag, vmm/virtio/p9).
const WorkspaceTag = "sandfs-world"

// workspaceMsize is the largest msize Linux's virtio 9p transport takes
// (PAGE_SIZE × (VIRTQUEUE_NUM - 3), net/9p/trans_virtio.c).
const workspaceMsize = 4096 * 125

// MountWorkspace mounts the sandbox's world (9P2000.L, served by the
// daemon) at Workspace: over the VMM's virtio-9p device (one descriptor
// chain per request and its whole reply) if it has one, else over a
// connection to the host's vsock port (trans=fd; the kernel holds the
// connection and the agent's descriptor is closed). A mount already at
// Workspace (its session ended with a restore from a snapshot or a
// daemon restart) is detached first: processes inside it keep the dead
// one (EIO), new lookups reach the new one. The device has one channel:
// while a detached mount still has users it keeps it, and the new mount
// goes over vsock.
func MountWorkspace(port uint32) error {
	for range maxStacked {
		if err := unix.Unmount(Workspace, unix.MNT_DETACH); err != nil {
			break // EINVAL: nothing mounted there (any other error: the mount below says)
		}
	}
	if err := os.MkdirAll(Workspace, 0o755); err != nil {
		return msg.Errorf(syscall.EIO, "workspace: %v", err)
	}
	opts := fmt.Sprintf("trans=virtio,version=9p2000.L,msize=%d,access=any,cache=%s", workspaceMsize, workspaceCache)
	verr := unix.Mount(WorkspaceTag, Workspace, "9p", workspaceFlags, opts)
	if verr == nil {
		return nil
	}
	if err := mountWorkspaceFd(port); err != nil {
		return msg.Errorf(msg.Errno(err), "%v (over virtio-9p: %v)", err, verr)
	}
	return nil
}

// mountWorkspaceFd mounts the world over a vsock connection to port.
func mountWorkspaceFd(port uint32) error {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return msg.Errorf(msg.Errno(err), "workspace: socket: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_HOST, Port: port}); err != nil {
		return msg.Errorf(msg.Errno(err), "workspace: connect to host port %d: %v", port, err)
	}
	opts := fmt.Sprintf("trans=fd,rfdno=%d,wfdno=%d,version=9p2000.L,msize=%d,access=any,cache=%s", fd, fd, 512<<10, workspaceCache)
	if err := unix.Mount(WorkspaceTag, Workspace, "9p", workspaceFlags, opts); err != nil {
		return msg.Errorf(msg.Errno(err), "workspace: mount 9p: %v", err)
	}
	return nil
}

// workspaceCache is the 9p cache mode of /workspace: loose, the guest
// keeps names, attributes and pages and does not ask the server again by
// itself; the host tells it when the world changed under it
// (ForgetWorkspace, the agent's "forget"). docs/worlds.md "Cache mode".
const workspaceCache = "loose"

// workspaceFlags makes every write to /workspace synchronous
// (MS_SYNCHRONOUS, mount(8)'s "sync"). Linux 6.1's 9p in loose mode
// writes back (fs/9p/vfs_file.c: v9fs_cached_file_operations_dotl has
// generic_file_write_iter), so a guest's writes stayed dirty in its page
// cache for up to dirty_expire_centisecs, out of the daemon's sight: a
// snapshot of the world missed them, and the restored guest's pages died
// with the old mount's session (after a rollback, in a clone and after a
// daemon restart, files written shortly before read back empty or old:
// test/guestlab TestWorldSnapshot). With the flag each write(2) returns
// once the daemon has the data (generic_write_sync: the written range
// and a Tfsync), as with cache=none (fs/9p/vfs_super.c sets the same
// flag itself there), and only reads and metadata are cached.
const workspaceFlags = unix.MS_SYNCHRONOUS

// ForgetWorkspace makes the guest ask the server again for what it has
// cached of /workspace: dirty pages of shared mappings are written back
// (syncfs), then the kernel drops its clean page cache and its unused
// dentries and inodes (drop_caches 3; Linux has no finer call for a 9p
// mount). Names, attributes and pages of files held open or in use (a
// working directory) stay until they are let go. (Not keyed on statfs's
// type: a 9P2000.L mount reports the server's file system type.)
func ForgetWorkspace() error {
	fd, err := unix.Open(Workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	err = unix.Syncfs(fd)
	unix.Close(fd)
	if err != nil {
		return msg.Errorf(msg.Errno(err), "forget: %v", err)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return msg.Errorf(msg.Errno(err), "forget: %v", err)
	}
	return nil
}

// maxStacked bounds the mounts MountWorkspace detaches at Workspace.
const maxStacked = 16
