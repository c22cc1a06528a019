package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"sandfs/fs/client"
)

// guestSh runs script with sh -c in sandbox id's guest, its stdout to
// w; a non-zero exit is an error with the status and stderr's tail.
func (d *daemon) guestSh(ctx context.Context, id, script string, w io.Writer) error {
	var errb bytes.Buffer
	st, err := d.c.Exec(ctx, id, client.ExecOptions{Argv: []string{"sh", "-c", script}, Stdout: w, Stderr: &errb})
	if err == nil && st.ExitCode() != 0 {
		err = fmt.Errorf("%q: %s: %s", script, st.Line, tail(errb.Bytes()))
	}
	return err
}

// waitGuest runs probe (a shell script) in sandbox id's guest once a
// second until it succeeds (the guest is up, and what probe tests is
// there), for at most 3 minutes.
func (d *daemon) waitGuest(ctx context.Context, id, probe string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for d.guestSh(ctx, id, probe, io.Discard) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox %s: %q failed for 3m", id, probe)
		}
		time.Sleep(time.Second)
	}
	return nil
}
