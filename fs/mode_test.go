package fs

import (
	iofs "io/fs"
	"testing"

	"golang.org/x/sys/unix"
)

func TestUnixModeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		m iofs.FileMode
		u uint32
	}{
		{0o644, unix.S_IFREG | 0o644},
		{iofs.ModeDir | 0o755, unix.S_IFDIR | 0o755},
		{iofs.ModeSymlink | 0o777, unix.S_IFLNK | 0o777},
		{iofs.ModeDevice | iofs.ModeCharDevice | 0o600, unix.S_IFCHR | 0o600},
		{iofs.ModeDevice | 0o660, unix.S_IFBLK | 0o660},
		{iofs.ModeNamedPipe | 0o600, unix.S_IFIFO | 0o600},
		{iofs.ModeSocket | 0o755, unix.S_IFSOCK | 0o755},
		{iofs.ModeSetuid | iofs.ModeSetgid | 0o755, unix.S_IFREG | unix.S_ISUID | unix.S_ISGID | 0o755},
		{iofs.ModeDir | iofs.ModeSticky | 0o777, unix.S_IFDIR | unix.S_ISVTX | 0o777},
	} {
		if u := UnixMode(c.m); u != c.u {
			t.Errorf("UnixMode(%v) = %#o; want %#o", c.m, u, c.u)
		}
		if m := ModeOfUnix(c.u); m != c.m {
			t.Errorf("ModeOfUnix(%#o) = %v; want %v", c.u, m, c.m)
		}
	}
}
