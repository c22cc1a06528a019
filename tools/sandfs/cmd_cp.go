package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"sandfs/fs/client"
)

func init() {
	register("cp", "copy a file between the host and a sandbox (ID:/path)", runCp)
}

// runCp: sandfs cp SRC DST, where one of them is ID:/path (the guest's
// file, through sandboxes/ID/fs/) and the other a host path ("-" is
// stdin or stdout). A DST that is a directory gets SRC's base name.
func runCp(args []string) int {
	fl := flag.NewFlagSet("cp", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fl)
	pos, err := parseInterspersed(fl, args, 0)
	if err != nil {
		return 2
	}
	if len(pos) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sandfs cp SRC DST   (one of them ID:/path)")
		return 2
	}
	src, srcRemote := client.ParseRemote(pos[0])
	dst, dstRemote := client.ParseRemote(pos[1])
	if srcRemote == dstRemote {
		fmt.Fprintln(os.Stderr, "sandfs cp: exactly one of SRC and DST must be ID:/path")
		return 2
	}
	c, err := cf.dial()
	if err != nil {
		return fail("cp", err)
	}
	defer c.Close()
	if srcRemote {
		var w io.Writer = os.Stdout
		if pos[1] != "-" {
			p := pos[1]
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				p = filepath.Join(p, filepath.Base(src.Path))
			}
			f, err := os.Create(p)
			if err != nil {
				return fail("cp", err)
			}
			defer f.Close()
			w = f
		}
		if _, err := c.CopyFrom(src, w); err != nil {
			return fail("cp", err)
		}
		return 0
	}
	var r io.Reader = os.Stdin
	perm := uint32(0o644)
	name := "stdin"
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return fail("cp", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil {
			perm = uint32(fi.Mode().Perm())
		}
		r, name = f, filepath.Base(pos[0])
	}
	if _, err := c.CopyTo(r, dst, name, perm); err != nil {
		return fail("cp", err)
	}
	return 0
}
