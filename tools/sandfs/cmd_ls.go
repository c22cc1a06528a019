package main

import (
	"flag"
	"fmt"
	"os"
)

func init() {
	register("ls", "list sandboxes (their status lines)", runLs)
}

// runLs: sandfs ls prints sandboxes/*/status, one line each.
func runLs(args []string) int {
	fl := flag.NewFlagSet("ls", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fl)
	pos, err := parseInterspersed(fl, args, 0)
	if err != nil {
		return 2
	}
	if len(pos) != 0 {
		fmt.Fprintln(os.Stderr, "usage: sandfs ls")
		return 2
	}
	c, err := cf.dial()
	if err != nil {
		return fail("ls", err)
	}
	defer c.Close()
	lines, err := c.List()
	if err != nil {
		return fail("ls", err)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	return 0
}
