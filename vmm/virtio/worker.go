package virtio

import "sync"

// Drain pops every available chain of q, hands it to fn, pushes it back
// with the length fn returns and signals the driver; then it re-arms
// notifications (EVENT_IDX) and repeats until the queue is empty. It
// returns false if the driver queued a bad chain (the device is then
// failed). Call it between Begin and End.
func (t *Transport) Drain(q *Queue, fn func(c *Chain) uint32) bool {
	return t.DrainSignal(q, fn, t.SignalUsed)
}

// DrainSignal is Drain with the driver's notification left to signal,
// called after each batch of chains (a device that defers its used-buffer
// notifications decides there whether to call SignalUsed).
func (t *Transport) DrainSignal(q *Queue, fn func(c *Chain) uint32, signal func(q *Queue)) bool {
	for {
		for {
			c, ok, err := q.Pop()
			if err != nil {
				t.Fail(err)
				return false
			}
			if !ok {
				break
			}
			q.Push(c.Head, fn(c))
		}
		signal(q)
		q.SetAvailEvent()
		if !q.Pending() {
			return true
		}
	}
}

// Runner runs a device's goroutines between Activate and Reset.
type Runner struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// Go starts fn; fn returns when stop is closed.
func (r *Runner) Go(fn func(stop <-chan struct{})) {
	if r.stop == nil {
		r.stop = make(chan struct{})
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn(r.stop)
	}()
}

// Stop closes stop and waits for every goroutine started with Go.
func (r *Runner) Stop() {
	if r.stop != nil {
		close(r.stop)
	}
	r.wg.Wait()
	r.stop = nil
}

// Loop is the common device goroutine: on every kick (and once at start)
// it runs fn between t.Begin and t.End, until stop is closed or the device
// fails.
func (t *Transport) Loop(stop <-chan struct{}, kick Kick, fn func() bool) {
	for {
		if !t.Begin() {
			return
		}
		ok := fn()
		t.End()
		if !ok {
			return
		}
		select {
		case <-stop:
			return
		case <-kick:
		}
	}
}
