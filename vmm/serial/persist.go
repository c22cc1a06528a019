package serial

// State is the UART's saved state (registers and the receive FIFO).
type State struct {
	IER, LCR, MCR, SCR, DLL, DLM, FCR uint8
	THREPending                       bool
	RX                                []byte
	Level                             bool
}

// Save returns the UART's state; call while the vCPUs are paused.
func (s *Serial) Save() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
	return State{IER: s.ier, LCR: s.lcr, MCR: s.mcr, SCR: s.scr, DLL: s.dll, DLM: s.dlm, FCR: s.fcr,
		THREPending: s.threPending, RX: append([]byte(nil), s.rx...), Level: s.level}
}

// Restore loads st. The line level is taken as already set: the interrupt
// controllers' state is restored separately, with their view of the line.
func (s *Serial) Restore(st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ier, s.lcr, s.mcr, s.scr, s.dll, s.dlm, s.fcr = st.IER, st.LCR, st.MCR, st.SCR, st.DLL, st.DLM, st.FCR
	s.threPending = st.THREPending
	s.rx = append(s.rx[:0], st.RX...)
	s.level = st.Level
}
