package ctl

import "slices"

// State is a sandbox's lifecycle state. Its string form is what status,
// wait and the ctl read show, and what the state file records.
//
//	from       to         on
//	new        creating   start (clone handle) or new (/ctl)
//	new        removed    kill, rm, or the clone handle closed (Release)
//	creating   running    the runtime started the machine
//	creating   dead       the runtime failed (err: why)
//	creating   stopping   kill while creating
//	running    paused     pause
//	paused     running    resume
//	running    stopping   kill, timeout
//	paused     stopping   kill, timeout
//	running    dead       the machine ended by itself (err: why)
//	paused     dead       the machine ended by itself (err: why)
//	stopping   dead       the machine ended
//	dead       removed    rm
//
// After a daemon restart, a sandbox recorded as running, paused or
// stopping is re-attached (same state) or becomes dead with err
// "daemon restarted". removed is never on disk: it is what a *Sandbox
// handle reports once its record is gone.
type State string

// The states; see the diagram and transitions.
const (
	StateNew      State = "new"      // reserved by /clone, configurable, not persisted
	StateCreating State = "creating" // runtime starting the machine
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopping State = "stopping" // kill in progress
	StateDead     State = "dead"     // ended; record kept until rm
	StateRemoved  State = "removed"  // record removed; handle is stale
)

// transitions is the table of allowed state changes.
var transitions = map[State][]State{
	StateNew:      {StateCreating, StateRemoved},
	StateCreating: {StateRunning, StateStopping, StateDead},
	StateRunning:  {StatePaused, StateStopping, StateDead},
	StatePaused:   {StateRunning, StateStopping, StateDead},
	StateStopping: {StateDead},
	StateDead:     {StateRemoved},
	StateRemoved:  nil,
}

// CanGo reports whether the state machine allows from → to.
func CanGo(from, to State) bool {
	return slices.Contains(transitions[from], to)
}

// Ended reports whether s is dead or removed: nothing will run again.
func (s State) Ended() bool { return s == StateDead || s == StateRemoved }
