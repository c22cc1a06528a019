package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// raiseFileLimit raises the daemon's open files bound (RLIMIT_NOFILE),
// soft and hard, to the kernel's most (fs.nr_open) when it may (root
// with CAP_SYS_RESOURCE), else its soft bound to its hard one, and returns the bound it has. The
// daemon holds files for every sandbox (a world's open files among
// them, at most --guest-open-files per guest connection): under a
// hard bound of a few thousand, as a bare init leaves it, a few guests
// opening files on /workspace would leave the daemon none for the
// others. The VMMs it starts lower theirs again (vmm/vmmproc, maxFiles).
func raiseFileLimit() (uint64, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("open files limit: %w", err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > r.Max {
			if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}) == nil {
				return n, nil
			}
		}
	}
	if r.Cur < r.Max {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: r.Max, Max: r.Max}); err != nil {
			return r.Cur, fmt.Errorf("open files limit %d: %w", r.Max, err)
		}
	}
	return r.Max, nil
}
