package guest

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestCtlLines: the agent's /ctl messages as lines (hybrid.CtlPort) are
// applied in order and answered once, "ok"; the first that fails stops
// the rest and is answered with its errno and text (and shown by /err);
// a line too long, too many messages, or no empty line at the end apply
// nothing.
func TestCtlLines(t *testing.T) {
	ts := newTestServer(t, Options{})
	var got []string
	ts.srv.sys = sysOps{
		setClock:    func(tm time.Time) error { got = append(got, "clock "+tm.UTC().Format(time.RFC3339Nano)); return nil },
		setHostname: func(h string) error { got = append(got, "hostname "+h); return nil },
		addEntropy:  func(b []byte) error { got = append(got, fmt.Sprintf("entropy %d", len(b))); return nil },
	}
	exchange := func(send string, closeWrite bool) string {
		t.Helper()
		got = nil
		c, peer := unixPair(t)
		defer peer.Close()
		done := make(chan struct{})
		go func() { ts.srv.ctlLines(c); close(done) }()
		io.WriteString(peer, send)
		if closeWrite {
			peer.CloseWrite()
		}
		reply, err := bufio.NewReader(peer).ReadString('\n')
		if err != nil {
			t.Fatalf("no answer to %.60q: %v", send, err)
		}
		<-done
		return reply
	}
	seed := strings.Repeat("ab", 64)
	if r := exchange("entropy "+seed+"\nhostname box3\ntime 1700000000000000001\n\n", false); r != "ok\n" {
		t.Errorf("answer %q; want ok", r)
	}
	if want := "entropy 64|hostname box3|clock 2023-11-14T22:13:20.000000001Z"; strings.Join(got, "|") != want {
		t.Errorf("applied %q; want %q", got, want)
	}
	if r := exchange("hostname box4\ntime yesterday\nhostname box5\n\n", false); r != "error 22 time: want unix nanoseconds, got \"yesterday\"\n" {
		t.Errorf("answer %q; want EINVAL for the time", r)
	}
	if strings.Join(got, "|") != "hostname box4" {
		t.Errorf("applied %q; want only what came before the failure", got)
	}
	_, root := ts.dial()
	if e := readFile(t, root, "err"); !strings.Contains(e, "yesterday") {
		t.Errorf("/err = %q; want the failure", e)
	}
	for _, tc := range []struct {
		name, send string
		closeWrite bool
		errno      int
	}{
		{"a line too long", "hostname a\nhostname " + strings.Repeat("x", maxCtlLine) + "\n\n", false, 22},
		{"too many", strings.Repeat("hostname a\n", maxCtlMessages+1) + "\n", false, 7},
		{"no end", "hostname a\n", true, 22},
	} {
		r := exchange(tc.send, tc.closeWrite)
		if !strings.HasPrefix(r, fmt.Sprintf("error %d ", tc.errno)) || len(got) != 0 {
			t.Errorf("%s: answer %q, applied %q; want error %d and nothing applied", tc.name, r, got, tc.errno)
		}
	}
}
