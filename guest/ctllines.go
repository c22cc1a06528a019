package guest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

// The agent's /ctl without 9P: hybrid.CtlPort takes /ctl's messages
// (agentVerbs), one per line, and answers once. The host's refresh of a
// restored guest (entropy, hostname, clock) is then a connection and one
// exchange, where through 9P it is a connection, a version, an attach, a
// walk, an open and a write per message: each of those a round trip to a
// guest that has just resumed, whose first touches of its memory are the
// slow part of a `new` in the lab (docs/snapshots.md).
//
//	host → agent   one message per line, then an empty line
//	agent → host   "ok\n", or "error ERRNO TEXT\n" for the first that failed
//
// The messages are applied in order, as that many writes to /ctl would
// be, and stop at the first that fails (which /err and the log also
// show); then the connection closes.

// Bounds of one exchange: a line (an entropy message of 256 bytes is 521
// characters), the messages, and the time the host has to send them.
const (
	maxCtlLine     = 1024
	maxCtlMessages = 16
	ctlLinesTime   = 30 * time.Second
)

// ServeCtlLines accepts connections on l and answers each in its own
// goroutine.
func (s *Server) ServeCtlLines(l net.Listener) error { return acceptEach(l, s.ctlLines) }

// ctlLines runs one exchange on c and closes it.
func (s *Server) ctlLines(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(ctlLinesTime))
	msgs, err := readCtlLines(bufio.NewReaderSize(c, maxCtlLine))
	s.noteCtlErr(err)
	for _, m := range msgs {
		if err = s.agentCtl(m); err != nil {
			break
		}
	}
	reply := "ok\n"
	if err != nil {
		reply = fmt.Sprintf("error %d %s\n", msg.Errno(err), strings.ReplaceAll(err.Error(), "\n", " "))
	}
	c.Write([]byte(reply))
}

// readCtlLines reads messages up to the empty line that ends them: none
// applied if any line is too long, there are too many, or the end does
// not come.
func readCtlLines(r *bufio.Reader) ([][]byte, error) {
	var msgs [][]byte
	for {
		line, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, msg.Errorf(syscall.EINVAL, "ctl line of more than %d bytes", maxCtlLine-1)
		case err != nil:
			return nil, msg.Errorf(syscall.EINVAL, "ctl lines not ended by an empty line: %v", err)
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) == 0 {
			return msgs, nil
		}
		if len(msgs) == maxCtlMessages {
			return nil, msg.Errorf(syscall.E2BIG, "more than %d ctl messages", maxCtlMessages)
		}
		msgs = append(msgs, bytes.Clone(line))
	}
}
