// Package tailbuf keeps the end of a stream: the last bytes of a child's
// stderr or a console, for error messages.
package tailbuf

import "sync"

// Buffer keeps the last Max bytes written to it. It is safe for
// concurrent use.
type Buffer struct {
	Max int

	mu sync.Mutex
	b  []byte
}

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.Max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.Max:]...)
	}
	return len(p), nil
}

func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
