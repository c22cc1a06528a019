package ctl

import (
	"context"
	"fmt"
	"strings"

	"sandfs/ctl/msg"
)

// MaxMessage is the largest ctl message accepted, in bytes (including the
// trailing newline). Longer messages fail with E2BIG. It is far below the
// 9P iounit and go-fuse's MaxWrite, so one write(2) is one message.
const MaxMessage = msg.Max

// rules are the ctl files' message rules: msg's Text rules, MaxMessage.
var rules = msg.Rules{Max: MaxMessage}

// A Verb describes one ctl verb (a row of msg.Table): its name, how many
// positional arguments it takes, which key=value arguments it accepts,
// the states of the sandbox it acts on that it needs, its documentation
// and its handler. The documentation is the reference for the verb
// (man-page style: usage, effect, required state, errors); docs elsewhere
// point here.
type Verb = msg.Verb[handler, State]

// A Table is the set of verbs one file accepts, in documentation order.
// Its Lookup matches the whole first word, never a prefix.
type Table = msg.Table[handler, State]

// handler is what a verb does, in two steps. check (pure, called by
// Parse) validates the arguments and fills the typed fields of the
// Command; nil means no checks beyond the counts. Then the file applies
// it: /ctl calls plane (GlobalVerbs), sandboxes/<id>/ctl and /clone call
// sandbox, or reply for a verb whose reply a read gives (SandboxVerbs),
// a snapshot's ctl calls snap (SnapshotVerbs). Each row of a table sets the function of its
// file (TestTables), so dispatch needs no switch on verb names.
type handler struct {
	check   func(c *Command) error
	plane   func(p *Plane, ctx context.Context, c Command, v *Verb) (reply string, err error)
	sandbox func(s *Sandbox, ctx context.Context, c Command, v *Verb) error
	reply   func(s *Sandbox, ctx context.Context, c Command, v *Verb) (reply string, err error) // a SandboxVerbs verb that replies
	snap    func(p *Plane, ctx context.Context, c Command, v *Verb) error                       // SnapshotVerbs; c.Snap names it
	world   func(p *Plane, ctx context.Context, c Command, v *Verb) (reply string, err error)   // WorldVerbs; c.World names it
}

// Command is a parsed and validated ctl message.
type Command struct {
	Verb string            // the verb's name
	Args []string          // positional arguments, quotes removed
	Keys map[string]string // key=value arguments; nil if none

	// Typed values, filled by the verb's checks.
	ID    string // the sandbox named: `new [name]`, `kill <id>`, `rm <id>`
	Snap  string // the snapshot named: `snapshot [name]`, `rollback <snap>`, a snapshot's ctl
	World string // the world named: `world <name>` on /ctl, a world's ctl
	// clone [n] [concurrency=c]: how many, how many at a time.
	Count, Concurrency int
	Config             Config // settings given by `new` keys or by template/mem/cpus/timeout
	// retain [keep=n] [age=dur]: the rules with the keys given applied
	// (RetainSet says which).
	Retain    Retention
	RetainSet struct{ Keep, Age bool }
}

// Parse turns one message into a command of table t. It does no I/O and
// keeps no state. The message is one line: verb and arguments separated by
// blanks (spaces or tabs), at most one trailing newline, no other control
// characters, valid UTF-8, at most MaxMessage bytes. An argument containing
// blanks is quoted with single quotes; two single quotes inside quotes are
// one literal quote (rc(1) rules: a'b c'd is one argument "ab cd"). For verbs with Keys,
// an argument containing '=' is key=value; each key at most once.
// (msg.Rules.Split and msg.Table.Parse.)
//
// Errors (all *Error): E2BIG too long; EINVAL for everything else: not
// text, several lines, empty, unterminated quote, unknown verb, wrong
// number of arguments, unknown or repeated key, invalid value.
func Parse(m []byte, t Table) (Command, error) {
	c, _, err := parse(m, t)
	return c, err
}

// parse is Parse, also returning the verb's row.
func parse(m []byte, t Table) (Command, *Verb, error) {
	call, err := t.Parse(rules, m)
	if err != nil {
		return Command{}, nil, err
	}
	v := call.Verb
	c := Command{Verb: v.Name, Args: call.Args, Keys: call.Keys}
	if v.Run.check != nil {
		if err := v.Run.check(&c); err != nil {
			return Command{}, nil, err
		}
	}
	return c, v, nil
}

// String returns the command as a message Parse accepts (without newline).
func (c Command) String() string {
	var b strings.Builder
	b.WriteString(c.Verb)
	for _, a := range c.Args {
		b.WriteByte(' ')
		b.WriteString(msg.Quote(a))
	}
	for _, k := range sortedKeys(c.Keys) {
		fmt.Fprintf(&b, " %s", msg.Quote(k+"="+c.Keys[k]))
	}
	return b.String()
}
