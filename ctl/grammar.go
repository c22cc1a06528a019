package ctl

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

// MaxMessage is the largest ctl message accepted, in bytes (including the
// trailing newline). Longer messages fail with E2BIG. It is far below the
// 9P iounit and go-fuse's MaxWrite, so one write(2) is one message.
const MaxMessage = 4096

// A Verb describes one ctl verb: its name, how many positional arguments
// it takes, which key=value arguments it accepts, and its documentation.
// The documentation is the reference for the verb (man-page style: usage,
// effect, required state, errors); docs elsewhere point here.
type Verb struct {
	Name  string   // the whole first word of the message
	Usage string   // e.g. "new [name] [template=name] [mem=size]"
	Min   int      // minimum positional arguments
	Max   int      // maximum positional arguments
	Keys  []string // accepted key=value keys; nil: '=' is not special
	Doc   string   // effect, required state, errors

	// check validates the arguments and fills the typed fields of the
	// command; nil means no checks beyond the counts.
	check func(c *Command) error
}

// A Table is the set of verbs one file accepts, in documentation order.
type Table []Verb

// Lookup returns the verb named exactly name (the whole word, never a
// prefix), or nil.
func (t Table) Lookup(name string) *Verb {
	for i := range t {
		if t[i].Name == name {
			return &t[i]
		}
	}
	return nil
}

// Command is a parsed and validated ctl message.
type Command struct {
	Verb string            // the verb's name
	Args []string          // positional arguments, quotes removed
	Keys map[string]string // key=value arguments; nil if none

	// Typed values, filled by the verb's checks.
	ID     string // the sandbox named: `new [name]`, `kill <id>`, `rm <id>`
	Config Config // settings given by `new` keys or by template/mem/cpus/timeout
}

// Parse turns one message into a command of table t. It does no I/O and
// keeps no state. The message is one line: verb and arguments separated by
// blanks (spaces or tabs), at most one trailing newline, no other control
// characters, valid UTF-8, at most MaxMessage bytes. An argument containing
// blanks is quoted with single quotes; two single quotes inside quotes are
// one literal quote (rc(1) rules: a'b c'd is one argument "ab cd"). For verbs with Keys,
// an argument containing '=' is key=value; each key at most once.
//
// Errors (all *Error): E2BIG too long; EINVAL for everything else: not
// text, several lines, empty, unterminated quote, unknown verb, wrong
// number of arguments, unknown or repeated key, invalid value.
func Parse(msg []byte, t Table) (Command, error) {
	if len(msg) > MaxMessage {
		return Command{}, Errorf(syscall.E2BIG, "ctl: message too long (%d bytes, max %d)", len(msg), MaxMessage)
	}
	s := string(msg)
	if !utf8.ValidString(s) {
		return Command{}, Errorf(syscall.EINVAL, "ctl: message is not UTF-8 text %s", quote(s))
	}
	s = strings.TrimSuffix(s, "\n")
	for _, r := range s {
		switch {
		case r == '\n':
			return Command{}, Errorf(syscall.EINVAL, "ctl: more than one line %s", quote(s))
		case r == '\t':
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			return Command{}, Errorf(syscall.EINVAL, "ctl: control character in message %s", quote(s))
		}
	}
	words, err := tokenize(s)
	if err != nil {
		return Command{}, err
	}
	if len(words) == 0 {
		return Command{}, Errorf(syscall.EINVAL, "ctl: empty message")
	}
	v := t.Lookup(words[0])
	if v == nil {
		return Command{}, Errorf(syscall.EINVAL, "ctl: unknown verb %s", quote(words[0]))
	}
	c := Command{Verb: v.Name}
	for _, w := range words[1:] {
		k, val, ok := strings.Cut(w, "=")
		if !ok || v.Keys == nil {
			c.Args = append(c.Args, w)
			continue
		}
		if !slices.Contains(v.Keys, k) {
			return Command{}, Errorf(syscall.EINVAL, "%s: unknown key %s", v.Name, quote(w))
		}
		if _, dup := c.Keys[k]; dup {
			return Command{}, Errorf(syscall.EINVAL, "%s: repeated key %s", v.Name, quote(w))
		}
		if c.Keys == nil {
			c.Keys = map[string]string{}
		}
		c.Keys[k] = val
	}
	switch {
	case len(c.Args) < v.Min:
		return Command{}, Errorf(syscall.EINVAL, "%s: missing argument %s (usage: %s)", v.Name, quote(s), v.Usage)
	case len(c.Args) > v.Max:
		return Command{}, Errorf(syscall.EINVAL, "%s: too many arguments %s (usage: %s)", v.Name, quote(s), v.Usage)
	}
	if v.check != nil {
		if err := v.check(&c); err != nil {
			return Command{}, err
		}
	}
	return c, nil
}

// tokenize splits s into words at blanks, removing single quotes by rc(1)
// rules. A quoted empty string (two single quotes) is an empty word.
func tokenize(s string) ([]string, error) {
	var (
		words  []string
		b      strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		case c == '\'':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				if s[i] != '\'' {
					b.WriteByte(s[i])
					continue
				}
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				closed = true
				break
			}
			if !closed {
				return nil, Errorf(syscall.EINVAL, "ctl: unterminated quote %s", quote(s))
			}
		default:
			inWord = true
			b.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, b.String())
	}
	return words, nil
}

// Quote returns s as one ctl argument: unchanged if it needs no quotes,
// otherwise in single quotes with ' doubled. Parse(Quote(x)) gives x back.
func Quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t'") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// String returns the command as a message Parse accepts (without newline).
func (c Command) String() string {
	var b strings.Builder
	b.WriteString(c.Verb)
	for _, a := range c.Args {
		b.WriteByte(' ')
		b.WriteString(Quote(a))
	}
	for _, k := range sortedKeys(c.Keys) {
		fmt.Fprintf(&b, " %s", Quote(k+"="+c.Keys[k]))
	}
	return b.String()
}
