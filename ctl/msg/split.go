package msg

import (
	"strings"
	"syscall"
	"unicode/utf8"
)

// Max is the size limit of Text rules: the largest message, in bytes,
// trailing newline included (STYLE §2: "say, at most 4 KiB").
const Max = 4096

// Rules are what one file accepts as a message besides the grammar
// itself. The zero value is the Text rules of the daemon's ctl files.
type Rules struct {
	// Max is the largest message in bytes, trailing newline included;
	// longer ones fail with E2BIG. 0 means Max.
	Max int

	// Script lets a quoted part hold any byte but NUL, newlines
	// included, and drops the UTF-8 and control character checks
	// (NUL is still refused anywhere, and an unquoted newline or
	// carriage return is still a second line). The guest's procs/<n>/ctl
	// uses it so `exec` can carry a multi-line shell script.
	Script bool
}

func (r Rules) max() int {
	if r.Max <= 0 {
		return Max
	}
	return r.Max
}

// Split turns one message into its words, quotes removed; the first is
// the verb. It does no I/O and keeps no state. Errors (*Error): E2BIG too
// long; EINVAL empty, more than one line, unterminated quote, NUL byte,
// and with Text rules not UTF-8 or a control character other than tab.
func (r Rules) Split(m []byte) ([]string, error) {
	if len(m) > r.max() {
		return nil, Errorf(syscall.E2BIG, "ctl: message too long (%d bytes, max %d)", len(m), r.max())
	}
	s := string(m)
	if !r.Script && !utf8.ValidString(s) {
		return nil, Errorf(syscall.EINVAL, "ctl: message is not UTF-8 text %s", Cite(s))
	}
	s = strings.TrimSuffix(s, "\n")
	if !r.Script {
		for _, c := range s {
			switch {
			case c == '\n':
				return nil, errLines(s)
			case c == '\t':
			case c < 0x20, c == 0x7f, c >= 0x80 && c < 0xa0:
				return nil, Errorf(syscall.EINVAL, "ctl: control character in message %s", Cite(s))
			}
		}
	}
	words, err := split(s)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, Errorf(syscall.EINVAL, "ctl: empty message")
	}
	return words, nil
}

func errLines(s string) error {
	return Errorf(syscall.EINVAL, "ctl: more than one line %s", Cite(s))
}

// split splits s at blanks, removing single quotes by rc(1) rules; two
// single quotes (an empty quoted part) are an empty word. Unquoted, NUL,
// newline and carriage return are refused; quoted, only NUL (with Text
// rules Split has already refused the others).
func split(s string) ([]string, error) {
	var (
		words  []string
		b      strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case 0:
			return nil, errNUL(s)
		case '\n', '\r':
			return nil, errLines(s)
		case ' ', '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		case '\'':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				switch {
				case s[i] == 0:
					return nil, errNUL(s)
				case s[i] != '\'':
					b.WriteByte(s[i])
					continue
				case i+1 < len(s) && s[i+1] == '\'':
					b.WriteByte('\'')
					i++
					continue
				}
				closed = true
				break
			}
			if !closed {
				return nil, Errorf(syscall.EINVAL, "ctl: unterminated quote %s", Cite(s))
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

func errNUL(s string) error {
	return Errorf(syscall.EINVAL, "ctl: NUL byte in message %s", Cite(s))
}

// Quote returns s as one message word: unchanged if it needs no quotes,
// otherwise in single quotes with each ' doubled. Split gives s back
// (a newline inside quotes only under Script rules; NUL never).
func Quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\r'") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
