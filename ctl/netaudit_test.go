package ctl

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestAuditLog: a reader gets the lines from its sequence number on,
// waits for the next when it has read all, is ended by its context, and
// one that fell behind the kept lines starts at the oldest kept.
func TestAuditLog(t *testing.T) {
	var l auditLog
	l.add("a")
	l.add("b")
	lines, next, err := l.read(context.Background(), 0)
	if err != nil || len(lines) != 2 || lines[0] != "a" || next != 2 {
		t.Fatalf("read(0) = %q, %d, %v; want [a b], 2", lines, next, err)
	}
	got := make(chan []string, 1)
	go func() {
		lines, _, _ := l.read(context.Background(), next)
		got <- lines
	}()
	// The reader has read all and waits (its wake-up channel exists, and
	// it has returned nothing) before the next line comes.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		waiting := l.changed != nil
		l.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a read at the end did not wait for the next line")
		}
	}
	select {
	case lines := <-got:
		t.Fatalf("a read at the end returned %q before the next line", lines)
	default:
	}
	l.add("c")
	if lines := <-got; len(lines) != 1 || lines[0] != "c" {
		t.Errorf("waiting read = %q; want [c]", lines)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := l.read(ctx, 3); err == nil {
		t.Error("read with a cancelled context at the end returned no error")
	}
	for i := 0; i < auditKeep+10; i++ {
		l.add(fmt.Sprint(i))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines, next, err = l.read(ctx, 0)
	if err != nil || len(lines) != auditKeep || lines[0] != "10" || next != uint64(3+auditKeep+10) {
		t.Errorf("read(0) after %d lines = %d lines from %q, next %d, %v", 3+auditKeep+10, len(lines), lines[0], next, err)
	}
}

// TestAuditAttach: a machine with a network sends its audit lines to
// its sandbox's net/audit.
func TestAuditAttach(t *testing.T) {
	rt := &netRuntime{fakeRuntime: newFakeRuntime()}
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new a")
	s, _ := p.Lookup("a")
	rt.m.audit("2026-12-01T19:01:01.778Z tcp 192.0.2.1:80 - reset 60")
	lines, _, err := s.AuditRead(ctx(t), 0)
	if err != nil || len(lines) != 1 || lines[0] != "2026-12-01T19:01:01.778Z tcp 192.0.2.1:80 - reset 60" {
		t.Errorf("AuditRead = %q, %v", lines, err)
	}
}
