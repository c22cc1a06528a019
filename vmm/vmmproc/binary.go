package vmmproc

import (
	"os"
	"path/filepath"
)

// BinaryName is the VMM-only executable (tools/sandfs-vmm), which `make
// build` puts beside bin/sandfs. It takes the arguments Launch gives any
// VMM binary ("vmm", then Main's flags) and runs Main: the same process
// as `sandfs vmm`, with a fraction of the code mapped and initialised
// (docs/snapshots.md "What an idle VMM's memory is").
const BinaryName = "sandfs-vmm"

// FindBinary returns BinaryName in the directory of this executable
// (bin/sandfs → bin/sandfs-vmm, natively and in the lab's /opt/sandfs),
// or "" when there is none: Config.Binary "" then runs this executable,
// whose `vmm` subcommand is the same process. The daemon and the
// benchmark set Config.Binary from it; tests leave it to their own
// binary.
func FindBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return besideExe(exe)
}

// besideExe is FindBinary for the executable exe: BinaryName in exe's
// directory if it is a regular file that someone may execute.
func besideExe(exe string) string {
	p := filepath.Join(filepath.Dir(exe), BinaryName)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return p
}
