package vmm

import (
	"fmt"
	"syscall"

	"sandfs/ctl/msg"
)

// A machine's life after Start: pause and resume, the end (a vCPU's exit,
// Stop or Close), and waiting for it.

// reap runs the devices' Close hooks once the machine has ended and every
// vCPU goroutine has returned (end already kicked them), then closes
// reaped. It never touches kvm_run or RAM after that: Close waits for
// reaped before it unmaps them.
func (m *Machine) reap() {
	defer close(m.reaped)
	<-m.done
	for _, c := range m.vcpus {
		<-c.exited
	}
	if m.undebug != nil {
		m.undebug()
	}
	m.serial.Flush()
	m.closeDevices()
}

// closeDevices runs every device's Close hook, in order.
func (m *Machine) closeDevices() {
	for _, h := range m.hooks {
		if h.Close != nil {
			if err := h.Close(); err != nil {
				m.log.Warn("close device", "device", h.name, "err", err)
			}
		}
	}
}

// end records why the machine ended (the first reason wins) and wakes every
// vCPU.
func (m *Machine) end(reason ExitReason, err error) {
	m.endOnce.Do(func() {
		m.reason, m.err = reason, err
		if err != nil {
			m.log.Error("machine ended", "reason", reason, "err", err)
		} else {
			m.log.Info("machine ended", "reason", reason)
		}
		close(m.done)
		for _, c := range m.vcpus {
			c.kick()
		}
	})
}

// Done is closed when the machine has ended.
func (m *Machine) Done() <-chan struct{} { return m.done }

// Exit returns why the machine ended (ExitRunning before), and the error
// for ExitError.
func (m *Machine) Exit() (ExitReason, error) {
	select {
	case <-m.done:
		return m.reason, m.err
	default:
		return ExitRunning, nil
	}
}

// Wait blocks until the machine has ended and its vCPU threads are gone.
func (m *Machine) Wait() (ExitReason, error) {
	<-m.done
	m.ctl.Lock()
	started := m.started
	m.ctl.Unlock()
	if started {
		for _, c := range m.vcpus {
			<-c.exited
		}
	}
	return m.reason, m.err
}

// Pause stops every vCPU outside KVM_RUN (each completes its pending I/O
// first) and then the devices' own goroutines. Pausing a paused machine is
// a no-op.
func (m *Machine) Pause() error {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return fmt.Errorf("pause: %w", ErrEnded)
	}
	if !m.started {
		return msg.Errorf(syscall.EBUSY, "pause: not started")
	}
	if m.paused {
		return nil
	}
	for _, c := range m.vcpus {
		if _, err := c.request(evPause); err != nil {
			return fmt.Errorf("pause: vcpu %d: %w", c.id, err)
		}
	}
	for _, h := range m.hooks {
		if h.Pause != nil {
			h.Pause()
		}
	}
	m.serial.Flush()
	m.paused = true
	return nil
}

// Resume restarts a paused machine.
func (m *Machine) Resume() error {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return fmt.Errorf("resume: %w", ErrEnded)
	}
	if !m.paused {
		return nil
	}
	for _, h := range m.hooks {
		if h.Resume != nil {
			h.Resume()
		}
	}
	for _, c := range m.vcpus {
		if _, err := c.request(evResume); err != nil {
			return fmt.Errorf("resume: vcpu %d: %w", c.id, err)
		}
	}
	m.paused = false
	return nil
}

// Paused reports whether the machine is paused.
func (m *Machine) Paused() bool {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	return m.paused
}

// Stop ends the machine (running or paused) and waits for its vCPU
// threads.
func (m *Machine) Stop() {
	m.end(ExitStopped, nil)
	m.Wait()
}

// Close stops the machine (if it still runs), runs the devices' Close hooks
// (also for a machine that never started), and then, once no vCPU thread,
// device goroutine or control call can touch them, releases the vCPUs'
// kvm_run areas, KVM and guest RAM. A second Close is a no-op.
func (m *Machine) Close() error {
	m.end(ExitStopped, nil) // kicks the vCPUs; a no-op if it already ended
	m.ctl.Lock()            // no control call (Pause, Save, Snapshot...) in flight
	defer m.ctl.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if m.started {
		<-m.reaped // vCPU goroutines gone, device Close hooks done
	} else {
		m.closeDevices()
	}
	return m.close()
}

// close releases KVM and RAM. Only from Close, or from NewMachine failing
// (nothing runs yet).
func (m *Machine) close() error {
	for _, c := range m.vcpus {
		c.k.Close()
	}
	if m.vm != nil {
		m.vm.Close()
		m.vm = nil
	}
	if m.sys != nil {
		m.sys.Close()
		m.sys = nil
	}
	if m.ram != nil {
		return m.ram.close()
	}
	return nil
}
