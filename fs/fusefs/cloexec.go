package fusefs

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeFUSEOnExec marks every /dev/fuse descriptor of the process
// close-on-exec. go-fuse's direct mount opens the device without
// O_CLOEXEC, so every child the daemon starts (each VMM, which a hostile
// guest may own) would inherit the mount's FUSE connection: it could read
// and answer the mount's requests, and it keeps a killed daemon's mount
// alive (every access to it then hangs). Called right after the mount,
// before the daemon starts any child.
func closeFUSEOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || t != "/dev/fuse" {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("close-on-exec of /dev/fuse (fd %d): %w", fd, err)
		}
	}
	return nil
}
