package ctl

import (
	"context"
	"time"
)

// Config is what a sandbox is made of, as given by `new` keys or by the
// configure verbs on a clone handle. The zero value of a field means "not
// given" (Defaults fills it), except for Timeout, where 0 means no timeout.
type Config struct {
	Template string        // template name, default "base"
	MemBytes uint64        // guest RAM in bytes, default 256 MiB
	CPUs     int           // vCPUs, default 1
	World    string        // world attached at /workspace, "" for none
	Timeout  time.Duration // kill after this long running; 0: never
	// Net is the egress policy (package netpolicy's grammar, canonical
	// text; "" is default deny) of the sandbox's network, where the
	// runtime gives it one (VMMRuntime.Net).
	Net string
	// Group is the named group (new's group=) whose members may reach
	// each other where both policies allow it (netgroup.go), "" none;
	// Member is the sandbox's member address in it, chosen by the
	// plane when the sandbox is made (never by a message).
	Group, Member string
	// From is the snapshot the sandbox is restored from (new from=),
	// "" for its template; the snapshot gives Template, MemBytes and
	// CPUs. The runtime's SnapshotRestorer starts it. Not persisted.
	From string
}

// Spec is what the runtime needs to start one sandbox's machine.
type Spec struct {
	ID string // the sandbox id, [a-z0-9][a-z0-9-]{0,62}
	Config
	// Dir is the sandbox's private runtime directory,
	// <stateDir>/run/<id>; it exists when Start or Reattach is called and
	// is removed (with everything in it) when the sandbox record is
	// removed. The runtime keeps whatever it needs to re-attach there.
	Dir string
	// UID is the host uid (and gid) the machine runs as, the sandbox's
	// for its whole life, from the runtime's IDs (IDRanger); 0 when the
	// runtime has none.
	UID int
	// Last is, for Reattach, the snapshot the machine last took or was
	// restored from as the sandbox's record says ("" unknown): its next
	// snapshot may be a delta over it.
	Last string
}

// Runtime starts machines. The VMM implements it (ctl/vmm.go); unit tests
// use fakes. Methods may be called concurrently for different sandboxes.
type Runtime interface {
	// Start creates the sandbox's machine and returns it once it runs.
	// ctx is cancelled if the sandbox is killed while creating or the
	// Plane is closed; Start should then give up promptly. Errors that
	// are *Error keep their errno (e.g. ENOENT for an unknown template);
	// others are reported as EIO.
	Start(ctx context.Context, s Spec) (Machine, error)
}

// Reattacher is optionally implemented by a Runtime that can find machines
// which outlived a daemon restart (for example a VMM process whose socket
// is in s.Dir). Open calls Reattach for each sandbox recorded as running,
// paused or stopping (a sandbox that was creating is not re-attached); on
// error the sandbox is marked dead with err "daemon restarted: <error>"
// (and the error logged), and Reattach must have left no machine running.
// Without Reattacher every such sandbox comes back dead with err "daemon
// restarted". Open then pauses or resumes the machine to the recorded
// state (running or paused): the daemon may have died between asking the
// machine and recording its answer.
type Reattacher interface {
	Reattach(ctx context.Context, s Spec) (Machine, error)
}

// Reaper is optionally implemented by a Runtime whose machines outlive
// the daemon. Open calls Reap for each run directory whose machine is not
// re-attached: of a sandbox recorded dead or creating, of a corrupt
// record, and of a directory no record names (a sandbox removed, or never
// recorded, when the daemon died), which Open then removes. Reap ends the
// machine still running there, if any, and removes what the runtime kept
// to find it again; logs and disk layers stay.
type Reaper interface {
	Reap(dir string) error
}

// Machine is one running sandbox as the runtime sees it. Methods may be
// called from several goroutines but the Plane never calls Pause, Resume
// and Stop concurrently on one Machine.
type Machine interface {
	// Pause stops the vCPUs; the machine keeps its state.
	Pause(ctx context.Context) error
	// Resume restarts the vCPUs after Pause.
	Resume(ctx context.Context) error
	// Stop ends the machine (from running or paused); Done is closed
	// once it has ended. Stop after the end is a no-op.
	Stop(ctx context.Context) error
	// Done is closed when the machine has ended, for any reason.
	Done() <-chan struct{}
	// Err says why the machine ended, after Done is closed: nil after
	// Stop, the failure otherwise (its text becomes the sandbox's err).
	Err() error
}

// Pider is optionally implemented by a Machine backed by a process (the
// per-sandbox VMM); its pid is shown in status. Pid is called with a lock
// held and must return at once.
type Pider interface {
	Pid() int
}

// Limiter is optionally implemented by a Machine that knows how its
// resources are limited; Limits is shown in status as limits=<value>:
// "cgroup2" or "cgroup1" (the cgroup version that limits it), "none"
// (it runs without limits). A Machine without Limiter counts as "none".
// Limits is called with a lock held and must return at once.
type Limiter interface {
	Limits() string
}
