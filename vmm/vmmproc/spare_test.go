package vmmproc

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// readySpare waits until s holds a ready spare and returns it, left
// ready (the next take or Launch gets it).
func readySpare(t *testing.T, s *Spares) *spare {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		var sp *spare
		if len(s.ready) > 0 {
			sp = s.ready[0]
		}
		s.mu.Unlock()
		if sp != nil {
			return sp
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare ready after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSpareHandoff: a spare (this test binary as `vmm -spare`) takes the
// arguments and descriptors it is sent: its stderr is the pipe it was
// given, and it runs Main with the arguments (a config that does not
// exist: usage error). Another, whose socket closes unsent, ends; Close
// ends the ready ones and makes no more.
func TestSpareHandoff(t *testing.T) {
	s, err := NewSpares("", false, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	readySpare(t, s)
	sp := s.take()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.send([]string{"-config", "/nonexistent/vmm.json"}, []*os.File{w}, []int{2}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out, _ := io.ReadAll(r)
	err = sp.cmd.Wait()
	if code := sp.cmd.ProcessState.ExitCode(); code != codeUsage || !strings.Contains(string(out), "/nonexistent/vmm.json") {
		t.Errorf("spare handed a missing config: exit %d (%v), stderr %q; want exit %d naming the file", code, err, out, codeUsage)
	}

	s.refill()
	readySpare(t, s)
	sp = s.take()
	sp.conn.Close()
	done := make(chan error, 1)
	go func() { done <- sp.cmd.Wait() }()
	select {
	case <-done:
		if code := sp.cmd.ProcessState.ExitCode(); code != codeUsage {
			t.Errorf("spare whose socket closed unsent: exit %d; want %d", code, codeUsage)
		}
	case <-time.After(10 * time.Second):
		sp.end()
		t.Error("a spare whose socket closed unsent still runs after 10s")
	}

	s.refill()
	sp = readySpare(t, s)
	s.Close()
	if sp.cmd.ProcessState == nil {
		t.Error("Close left a ready spare running")
	}
	s.refill()
	time.Sleep(100 * time.Millisecond)
	s.mu.Lock()
	making := s.making
	s.mu.Unlock()
	if s.take() != nil || making != 0 {
		t.Error("Close did not stop the refill")
	}
}

// TestSpareEndedOnFailedLaunch: a launch through Spares that fails before
// the handoff (a config Launch refuses) ends the spare it took instead
// of leaving it waiting.
func TestSpareEndedOnFailedLaunch(t *testing.T) {
	s, err := NewSpares("", false, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sp := readySpare(t, s)
	if _, err := s.Launch(context.Background(), Config{Detached: true}); err == nil {
		t.Fatal("Launch of an empty config succeeded")
	}
	if sp.cmd.ProcessState == nil {
		t.Error("the spare taken by a failed launch still runs")
	}
}
