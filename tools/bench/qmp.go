package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// qmp is a client of QEMU's machine protocol on a unix socket: one
// command at a time; events seen while waiting for a reply are kept.
type qmp struct {
	c      net.Conn
	dec    *json.Decoder
	events []string // "NAME" or, with a status, "NAME status"
}

// qmpMsg is any message QEMU sends: a greeting, a reply or an event.
type qmpMsg struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class, Desc string
	} `json:"error"`
	Event string `json:"event"`
	Data  struct {
		Status string `json:"status"`
	} `json:"data"`
}

// dialQMP connects to path (retried every 2 ms until ctx ends: QEMU
// creates it while starting), reads the greeting and leaves negotiation.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var c net.Conn
	var err error
	for {
		var d net.Dialer
		if c, err = d.DialContext(ctx, "unix", path); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	q := &qmp{c: c, dec: json.NewDecoder(c)}
	var m qmpMsg
	if err := q.dec.Decode(&m); err != nil || m.QMP == nil {
		c.Close()
		return nil, fmt.Errorf("qmp greeting: %v", err)
	}
	if _, err := q.do("qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

// do runs one command and returns its "return" value.
func (q *qmp) do(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	if err := json.NewEncoder(q.c).Encode(req); err != nil {
		return nil, fmt.Errorf("qmp %s: %v", cmd, err)
	}
	for {
		var m qmpMsg
		if err := q.dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("qmp %s: %v", cmd, err)
		}
		switch {
		case m.Event != "":
			q.events = append(q.events, strings.TrimSpace(m.Event+" "+m.Data.Status))
		case m.Error != nil:
			return nil, fmt.Errorf("qmp %s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
		default:
			return m.Return, nil
		}
	}
}

// waitEvent returns the first of events ("NAME" or "NAME status") seen,
// before or now.
func (q *qmp) waitEvent(events ...string) (string, error) {
	for _, e := range q.events {
		if slices.Contains(events, e) {
			return e, nil
		}
	}
	for {
		var m qmpMsg
		if err := q.dec.Decode(&m); err != nil {
			return "", fmt.Errorf("qmp: waiting for %s: %v", strings.Join(events, " or "), err)
		}
		e := strings.TrimSpace(m.Event + " " + m.Data.Status)
		if slices.Contains(events, e) || slices.Contains(events, m.Event) {
			return e, nil
		}
	}
}

// waitMigration polls query-migrate every 5 ms until the migration
// completes (nil) or fails.
func (q *qmp) waitMigration(ctx context.Context) error {
	for {
		b, err := q.do("query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("query-migrate: %v", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (q *qmp) close() { q.c.Close() }
