package guest

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair (ptmx(4), pts(4)): the master
// non-blocking (pollable), the slave blocking, both close-on-exec.
func openPTY(rows, cols uint16) (ptm, pts *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	ptm = os.NewFile(uintptr(fd), "/dev/ptmx")
	fail := func(e error) (*os.File, *os.File, error) { ptm.Close(); return nil, nil, e }
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt(3)
		return fail(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN) // ptsname(3)
	if err != nil {
		return fail(err)
	}
	if err := setWinsize(fd, rows, cols); err != nil {
		return fail(err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	return ptm, os.NewFile(uintptr(sfd), "/dev/pts/"+strconv.Itoa(n)), nil
}

// setWinsize sets a terminal's size (TIOCSWINSZ); the kernel sends
// SIGWINCH to its foreground process group. Zero means the default 24x80.
func setWinsize(fd int, rows, cols uint16) error {
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}
