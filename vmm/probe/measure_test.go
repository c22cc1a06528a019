package probe

import (
	"errors"
	"testing"
	"time"
)

// runs is a scripted test guest: each call takes the next result.
type runs []error

func (r *runs) guest() (TestGuestResult, error) {
	err := (*r)[0]
	*r = (*r)[1:]
	if err != nil {
		return TestGuestResult{}, err
	}
	return TestGuestResult{Loops: 1000, LoopTime: time.Millisecond, Exits: 10, ExitTime: time.Millisecond}, nil
}

func hostRate() float64 { return 2e6 } // the guest's 1e6/s is half of it

// TestMeasureStalledRun: a run that fails (a stalled nested guest) is one
// bad run; the verdict comes from a later run that finished.
func TestMeasureStalledRun(t *testing.T) {
	r := runs{errors.New("test guest did not finish in 20s"), nil}
	var f Facts
	f.measure(3, r.guest, hostRate)
	if f.GuestErr != "" || f.LoopRate != 1e6 || f.HostLoopRate != 2e6 {
		t.Fatalf("after a stalled run and a good one: %+v", f)
	}
	if len(r) != 0 {
		t.Fatalf("%d runs left; want the second to decide", len(r))
	}
}

// TestMeasureAllFail: when no run finishes, the last failure is the
// verdict, after every round.
func TestMeasureAllFail(t *testing.T) {
	r := runs{errors.New("first"), errors.New("second"), errors.New("third")}
	var f Facts
	f.measure(3, r.guest, hostRate)
	if f.GuestErr != "third" || f.LoopRate != 0 {
		t.Fatalf("no run finished: %+v", f)
	}
}

// TestMeasureKeepsGoodRun: a failure after a finished run does not undo it.
func TestMeasureKeepsGoodRun(t *testing.T) {
	r := runs{nil, errors.New("late")}
	var f Facts
	f.measure(2, r.guest, func() float64 { return 1e9 }) // too slow: a second round runs
	if f.GuestErr != "" || f.LoopRate != 1e6 {
		t.Fatalf("a good run then a failed one: %+v", f)
	}
}
