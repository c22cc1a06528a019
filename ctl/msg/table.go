package msg

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// Many as Verb.Max means any number of arguments.
const Many = -1

// A Verb is one row of a verb table: everything about one verb in one
// place, so a file's verbs can be reviewed at a glance, listed (usage
// lines, docs) and dispatched without a switch on names that could drift
// from the table. H is the handler's type (each file calls it its own
// way); S is the type of the states a verb needs (use Stateless when the
// file has none).
type Verb[H any, S comparable] struct {
	Name  string // the whole first word of a message (never a prefix)
	Usage string // e.g. "size ROWS COLS"; said by wrong-arity errors
	Min   int    // fewest positional arguments
	Max   int    // most positional arguments, or Many

	// Keys are the accepted key=value keys, each at most once; an
	// argument holding '=' is then a key, not a positional argument.
	// nil: '=' is not special.
	Keys []string

	// Needs are the states the verb is accepted in (nil: any), for the
	// caller to check with Allows and refuse with Refuse; NeedsWhy is
	// said after them in the refusal, e.g. "configure before start".
	Needs    []S
	NeedsWhy string

	Doc string // man-page text: effect, required state, errors
	Run H      // the handler
}

// Stateless is the state type of tables whose verbs need no state.
type Stateless struct{}

// A Table is the set of verbs one file accepts, in documentation order.
type Table[H any, S comparable] []Verb[H, S]

// A Call is one parsed message: the verb's row and its arguments.
type Call[H any, S comparable] struct {
	Verb *Verb[H, S]
	Args []string          // positional arguments, quotes removed
	Keys map[string]string // key=value arguments; nil if none
}

// Lookup returns the verb named exactly name (the whole word, never a
// prefix: `del` does not find `delete`), or nil.
func (t Table[H, S]) Lookup(name string) *Verb[H, S] {
	for i := range t {
		if t[i].Name == name {
			return &t[i]
		}
	}
	return nil
}

// Parse splits message m by rules r and finds its verb in t: the row,
// the positional arguments and the key=value ones. It does no I/O and
// keeps no state. Besides Split's errors it returns (EINVAL, same words
// for every table) unknown verb, unknown or repeated key, and missing
// argument or too many arguments (with the usage).
func (t Table[H, S]) Parse(r Rules, m []byte) (Call[H, S], error) {
	words, err := r.Split(m)
	if err != nil {
		return Call[H, S]{}, err
	}
	v := t.Lookup(words[0])
	if v == nil {
		return Call[H, S]{}, Errorf(syscall.EINVAL, "ctl: unknown verb %s", Cite(words[0]))
	}
	c := Call[H, S]{Verb: v}
	for _, w := range words[1:] {
		k, val, ok := strings.Cut(w, "=")
		if !ok || v.Keys == nil {
			c.Args = append(c.Args, w)
			continue
		}
		if !slices.Contains(v.Keys, k) {
			return Call[H, S]{}, Errorf(syscall.EINVAL, "%s: unknown key %s", v.Name, Cite(w))
		}
		if _, dup := c.Keys[k]; dup {
			return Call[H, S]{}, Errorf(syscall.EINVAL, "%s: repeated key %s", v.Name, Cite(w))
		}
		if c.Keys == nil {
			c.Keys = map[string]string{}
		}
		c.Keys[k] = val
	}
	line := strings.TrimSuffix(string(m), "\n")
	switch {
	case len(c.Args) < v.Min:
		return Call[H, S]{}, Errorf(syscall.EINVAL, "%s: missing argument %s (usage: %s)", v.Name, Cite(line), v.Usage)
	case v.Max != Many && len(c.Args) > v.Max:
		return Call[H, S]{}, Errorf(syscall.EINVAL, "%s: too many arguments %s (usage: %s)", v.Name, Cite(line), v.Usage)
	}
	return c, nil
}

// Allows reports whether v is accepted in state st.
func (v *Verb[H, S]) Allows(st S) bool {
	return v.Needs == nil || slices.Contains(v.Needs, st)
}

// Refuse is the error for v refused in state st: EBUSY with the state it
// needs, e.g. `pause: sandbox "t1" is paused; need running` for what
// `sandbox "t1"`.
func (v *Verb[H, S]) Refuse(what string, st S) *Error {
	return Errorf(syscall.EBUSY, "%s: %s is %v; need %s", v.Name, what, st, v.Needed())
}

// Needed says which states v needs: "running", "dead or new", "new,
// creating, running or paused", then NeedsWhy in parentheses if set;
// "any state" if Needs is nil.
func (v *Verb[H, S]) Needed() string {
	var b strings.Builder
	for i, st := range v.Needs {
		switch {
		case i == 0:
		case i == len(v.Needs)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprint(&b, st)
	}
	if v.Needs == nil {
		b.WriteString("any state")
	}
	if v.NeedsWhy != "" {
		fmt.Fprintf(&b, " (%s)", v.NeedsWhy)
	}
	return b.String()
}
