package testenv

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// KernelAtLeast reports whether the running kernel is release
// major.minor or later (uname -r).
func KernelAtLeast(t testing.TB, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	return ma > major || ma == major && mi >= minor
}
