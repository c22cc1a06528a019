package main

import (
	"flag"
	"fmt"
	"os"
)

func init() {
	register("kill", "kill a sandbox (waits until it is dead)", runKill)
}

// runKill: sandfs kill ID... is `echo kill > sandboxes/ID/ctl`.
func runKill(args []string) int {
	fl := flag.NewFlagSet("kill", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fl)
	pos, err := parseInterspersed(fl, args, 0)
	if err != nil {
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprintln(os.Stderr, "usage: sandfs kill ID...")
		return 2
	}
	c, err := cf.dial()
	if err != nil {
		return fail("kill", err)
	}
	defer c.Close()
	rc := 0
	for _, id := range pos {
		if err := c.Kill(id); err != nil {
			rc = fail("kill", err)
		}
	}
	return rc
}
