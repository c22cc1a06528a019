package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"sandfs/fs/client"
)

func init() {
	register("exec", "run a command in a sandbox: streams, stdin, exit status", runExec)
}

// runExec: sandfs exec [--cwd D] [--user U] [--env K=V]... ID -- CMD [ARG...]
// runs CMD through the sandbox's procs/ (no shell), copies its stdout and
// stderr to ours separately, forwards stdin and SIGINT/SIGTERM/SIGHUP,
// and exits with its status (128+N when killed by signal N). A command
// that cannot start (no such command: 127; not executable: 126; another
// refusal such as a missing cwd: 125) prints the agent's error.
func runExec(args []string) int {
	fl := flag.NewFlagSet("exec", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fl)
	var o client.ExecOptions
	fl.StringVar(&o.Cwd, "cwd", "", "working directory in the guest (default: the user's home)")
	fl.StringVar(&o.User, "user", "", "user name or uid[:gid] (default root)")
	var env listFlag
	fl.Var(&env, "env", "K=V for the environment (repeatable)")
	pos, err := parseInterspersed(fl, args, 1)
	if err != nil {
		return 2
	}
	if len(pos) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sandfs exec [--cwd D] [--user U] [--env K=V] ID -- CMD [ARG...]")
		return 2
	}
	o.Env = env
	o.Argv = pos[1:]
	o.Stdin, o.Stdout, o.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	o.Signals = sigs
	c, err := cf.dial()
	if err != nil {
		return fail("exec", err)
	}
	defer c.Close()
	st, err := c.Exec(context.Background(), pos[0], o)
	if err != nil {
		var se *client.StartError
		if errors.As(err, &se) {
			fail("exec", err)
			switch se.Err.Errno {
			case syscall.ENOENT:
				if se.Err.Text == "" || !isCwdError(se.Err.Text) {
					return 127
				}
			case syscall.EACCES:
				return 126
			}
			return 125
		}
		fail("exec", err)
		return 125
	}
	return st.ExitCode()
}

// isCwdError tells a missing cwd from a missing command (both ENOENT) by
// the agent's text ("start: cwd \"/x\" does not exist").
func isCwdError(text string) bool { return strings.Contains(text, "start: cwd ") }
