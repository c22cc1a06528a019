package lab

import _ "embed"

// serveScript is the command of `sandfs lab serve` inside the lab
// (serve.sh): it mounts the state disk, runs the daemon and, when stdin
// ends, pauses its sandboxes to disk and stops it.
//
//go:embed serve.sh
var serveScript string

// ServeCommand is the lab command that runs serve (the daemon's command
// line, without --state and --mount, which it adds) over the state disk
// (found by StateSerial, mounted at GuestStateMount, both passed to the
// script)
// (Options.StateDisk). Closing its stdin (Options.Stdin) stops it
// cleanly: running sandboxes are paused to disk, the daemon ends and the
// disk is unmounted, then the lab powers off.
func ServeCommand(serve []string) []string {
	return append([]string{"/bin/sh", "-c", serveScript, "lab-serve", StateSerial, GuestStateMount}, serve...)
}
