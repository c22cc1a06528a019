package ctl

// The retain verb of /ctl (verbs.go): the retention rules of
// retainrules.go, read and set through the tree as serve's flags set
// them at start.

import (
	"context"
	"strconv"
	"syscall"
	"time"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// Bounds of the retain verb's values.
const (
	maxRetainKeep = 1000000
	maxRetainAge  = 100 * 365 * 24 * time.Hour
)

// checkRetain checks retain's keys into c.Retain and c.RetainSet.
func checkRetain(c *Command) error {
	if v, ok := c.Keys["keep"]; ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > maxRetainKeep {
			return Errorf(syscall.EINVAL, "%s: keep must be a count 0..%d, not %s", c.Verb, maxRetainKeep, msg.Cite(v))
		}
		c.Retain.Keep, c.RetainSet.Keep = int(n), true
	}
	if v, ok := c.Keys["age"]; ok {
		d, ok := ParseTimeout(v)
		if !ok || d > maxRetainAge {
			return Errorf(syscall.EINVAL, "%s: age must be a duration (168h) or seconds, at most 100 years, not %s", c.Verb, msg.Cite(v))
		}
		c.Retain.MaxAge, c.RetainSet.Age = d, true
	}
	return nil
}

// ctlRetain sets the rules c gives (root and the daemon's user only),
// and replies with the rules in force.
func (p *Plane) ctlRetain(ctx context.Context, c Command, _ *Verb) (string, error) {
	if c.RetainSet.Keep || c.RetainSet.Age {
		if who := cred.Of(ctx); who.UID != 0 && who.UID != cred.Self().UID {
			return "", Errorf(syscall.EPERM, "%s: only root sets the retention rules, not uid %d", c.Verb, who.UID)
		}
		var r Retention
		p.setRetention(func(old Retention) Retention {
			r = old
			if c.RetainSet.Keep {
				r.Keep = c.Retain.Keep
			}
			if c.RetainSet.Age {
				r.MaxAge = c.Retain.MaxAge
			}
			return r
		})
		p.log.Info("retention rules set", "keep", r.Keep, "max_age", r.MaxAge)
	}
	return formatRetention(p.Retention()), nil
}

// Retention returns the retention rules in force.
func (p *Plane) Retention() Retention {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retain
}

// formatRetention is retain's reply: "keep=<n> age=<dur>\n".
func formatRetention(r Retention) string {
	return "keep=" + strconv.Itoa(r.Keep) + " age=" + formatTimeout(r.MaxAge) + "\n"
}
