// Package syncbuf is a bytes.Buffer that goroutines may share: what a
// test collects from a logger, a console or a child's output while it
// reads it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a goroutine-safe bytes.Buffer; the zero value is empty.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// WriteString appends s.
func (l *Buffer) WriteString(s string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.WriteString(s)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
