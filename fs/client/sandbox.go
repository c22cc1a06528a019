package client

import (
	"errors"
	"strconv"
	"strings"
	"syscall"

	cmsg "sandfs/ctl/msg"
)

// NewOptions are the keys of a `new` message; zero values are left out
// (the daemon's defaults).
type NewOptions struct {
	Name     string // "" for a generated id
	Template string
	Mem      string // e.g. 512M
	CPUs     int
	From     string // a snapshot to restore (then no Template, Mem, CPUs)
	World    string // a world to mount at /workspace
	Net      string // egress policy: deny, allow, or rules separated by ';'
	Group    string // a named group to join
	Timeout  string // e.g. 5m; "" for none
}

// message is o as a `new` message for /ctl.
func (o NewOptions) message() string {
	m := "new"
	if o.Name != "" {
		m += " " + cmsg.Quote(o.Name)
	}
	for _, kv := range []struct{ k, v string }{
		{"template", o.Template}, {"mem", o.Mem}, {"from", o.From}, {"world", o.World},
		{"net", o.Net}, {"group", o.Group}, {"timeout", o.Timeout},
	} {
		if kv.v != "" {
			m += " " + cmsg.Quote(kv.k+"="+kv.v)
		}
	}
	if o.CPUs != 0 {
		m += " cpus=" + strconv.Itoa(o.CPUs)
	}
	return m
}

// New creates and starts a sandbox (`new` on /ctl) and returns its id.
func (c *Client) New(o NewOptions) (string, error) {
	msg := o.message()
	f, err := c.Open("ctl", syscall.O_RDWR)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Msg(msg, "err"); err != nil {
		return "", err
	}
	f.off = int64(len(msg)) // the reply starts where the write ended
	b, err := f.ReadAllMax(MaxReply)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// List returns the status line of every sandbox.
func (c *Client) List() ([]string, error) {
	ents, err := c.ReadDir("sandboxes")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		b, err := c.ReadFile("sandboxes/" + e.Name + "/status")
		if err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // removed meanwhile
			}
			return nil, err
		}
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// Kill kills sandbox id and waits until it is dead.
func (c *Client) Kill(id string) error {
	return c.WriteMsg("sandboxes/"+id+"/ctl", "kill", "sandboxes/"+id+"/err")
}
