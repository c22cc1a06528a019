package client

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"sandfs/ctl/msg"
)

// Event is one line of a sandbox's watch file: what happened (create,
// write, remove, rename, chmod; or overflow, events lost, with no name)
// and the name, relative to the watched directory ("a.txt", "sub/b").
type Event struct {
	Type string
	Name string
}

// eventTypes are the types a watch line may have, and whether they
// carry a name.
var eventTypes = map[string]bool{
	"create": true, "write": true, "remove": true, "rename": true, "chmod": true, "overflow": false,
}

// maxEventLine bounds one event line (a name is at most PATH_MAX, quoted).
const maxEventLine = 16 << 10

// eventRules parse an event line: quoted names may hold any byte but NUL.
var eventRules = msg.Rules{Max: maxEventLine, Script: true}

// ParseEvent parses one event line (without its newline), e.g.
// "create a.txt", "rename 'a b'", "overflow". The agent writes them; a
// line that is not one (an unknown type, a missing or extra word, a name
// that is absolute or climbs with ..) is EIO: the guest is not trusted.
func ParseEvent(line string) (Event, error) {
	bad := func(why string) (Event, error) {
		return Event{}, msg.Errorf(syscall.EIO, "watch: bad event %s: %s", msg.Cite(line), why)
	}
	words, err := eventRules.Split([]byte(line))
	if err != nil {
		return bad(err.Error())
	}
	named, ok := eventTypes[words[0]]
	switch {
	case !ok:
		return bad("unknown type")
	case named != (len(words) == 2) || len(words) > 2:
		return bad("wrong number of words")
	}
	ev := Event{Type: words[0]}
	if named {
		ev.Name = words[1]
		if ev.Name == "" || strings.HasPrefix(ev.Name, "/") || ev.Name == ".." ||
			strings.HasPrefix(ev.Name, "../") || strings.Contains(ev.Name, "/../") || strings.HasSuffix(ev.Name, "/..") {
			return bad("name outside the watched directory")
		}
	}
	return ev, nil
}

// lineEnd returns the index of the first newline of b outside single
// quotes (a quoted name may hold newlines), or -1. Quotes toggle: a
// doubled quote inside quotes closes and reopens.
func lineEnd(b []byte) int {
	quoted := false
	for i, c := range b {
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '\n' && !quoted:
			return i
		}
	}
	return -1
}

// Watch is an open watch file of a sandbox: one inotify watch in its
// guest, ended by Close.
type Watch struct {
	f    *File
	buf  []byte // bytes read but not yet parsed
	rbuf []byte // the read buffer, made at the first read
}

// Watch opens sandbox id's watch file and watches guest directory dir
// (absolute), and with recursive its subdirectories.
func (c *Client) Watch(id, dir string, recursive bool) (*Watch, error) {
	path := "sandboxes/" + id + "/watch"
	f, err := c.Open(path, syscall.O_RDWR)
	if err != nil {
		return nil, err
	}
	m := "watch " + msg.Quote(dir)
	if recursive {
		m += " recursive"
	}
	if err := f.Msg(m, "sandboxes/"+id+"/err"); err != nil {
		f.Close()
		return nil, err
	}
	return &Watch{f: f}, nil
}

// Next returns the next event, blocking until there is one; io.EOF once
// the watched directory is gone (or the sandbox ended).
func (w *Watch) Next() (Event, error) {
	for {
		if i := lineEnd(w.buf); i >= 0 {
			line := string(w.buf[:i])
			w.buf = w.buf[i+1:]
			return ParseEvent(line)
		}
		if len(w.buf) > maxEventLine {
			return Event{}, msg.Errorf(syscall.EIO, "watch: an event line over %d bytes", maxEventLine)
		}
		if w.rbuf == nil {
			w.rbuf = make([]byte, 64<<10)
		}
		n, err := w.f.Read(w.rbuf)
		w.buf = append(w.buf, w.rbuf[:n]...)
		if errors.Is(err, io.EOF) && n == 0 {
			if len(w.buf) > 0 {
				return Event{}, fmt.Errorf("watch: %w: an event cut short", io.ErrUnexpectedEOF)
			}
			return Event{}, io.EOF
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Event{}, err
		}
	}
}

// Close ends the watch (the guest removes it when the file closes).
func (w *Watch) Close() error { return w.f.Close() }
