package main

import (
	"flag"
	"fmt"
	"os"

	"sandfs/fs/client"
)

func init() {
	register("new", "create and start a sandbox; print its id", runNew)
}

// runNew: sandfs new [--template T] [--mem M] [--cpus N] [--from S]
// [--world W] [--net P] [--group G] [--timeout D] [NAME] is
// `echo 'new NAME template=T mem=M cpus=N ...' > ctl` (the keys given)
// and prints the id.
func runNew(args []string) int {
	fl := flag.NewFlagSet("new", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fl)
	var o client.NewOptions
	fl.StringVar(&o.Template, "template", "", "template (default: the daemon's, base)")
	fl.StringVar(&o.Mem, "mem", "", "guest memory, e.g. 512M")
	fl.IntVar(&o.CPUs, "cpus", 0, "vCPUs")
	fl.StringVar(&o.From, "from", "", "restore this snapshot (not with --template, --mem, --cpus)")
	fl.StringVar(&o.World, "world", "", "world to mount at /workspace")
	fl.StringVar(&o.Net, "net", "", "egress policy: deny, allow, or rules separated by ';' (docs/network.md)")
	fl.StringVar(&o.Group, "group", "", "named group to join (docs/network.md \"Groups\")")
	fl.StringVar(&o.Timeout, "timeout", "", "kill the sandbox after this long, e.g. 5m")
	pos, err := parseInterspersed(fl, args, 0)
	if err != nil {
		return 2
	}
	if len(pos) > 1 {
		fmt.Fprintln(os.Stderr, "usage: sandfs new [--template T] [--mem M] [--cpus N] [--from S] [--world W] [--net P] [--group G] [--timeout D] [NAME]")
		return 2
	}
	if len(pos) == 1 {
		o.Name = pos[0]
	}
	c, err := cf.dial()
	if err != nil {
		return fail("new", err)
	}
	defer c.Close()
	id, err := c.New(o)
	if err != nil {
		return fail("new", err)
	}
	fmt.Println(id)
	return 0
}
