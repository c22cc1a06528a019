package ctl

// State is a sandbox's lifecycle state. Its string form is what status,
// wait and the ctl read show, and what the state file records.
//
//	          start            machine up
//	 new ──────────▶ creating ──────────▶ running ◀──┐
//	  │                 │  │               │  │  resume│ pause
//	  │ kill/rm/         │  │ start failed  │  └──▶ paused
//	  │ release          │  ▼               │ kill    │ kill
//	  ▼                  │ dead ◀───────────┼─────────┤ machine ended
//	removed              │ kill             ▼         │ (err: why)
//	  ▲                  └──────────▶ stopping ◀──────┘
//	  │ rm                                 │ machine ended
//	  └──────────────── dead ◀─────────────┘
//
// removed is not a lifecycle state on disk: it is what a *Sandbox handle
// reports once its record is gone.
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
	return contains(statesString(transitions[from]), string(to))
}

func statesString(ss []State) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// Ended reports whether s is dead or removed: nothing will run again.
func (s State) Ended() bool { return s == StateDead || s == StateRemoved }
