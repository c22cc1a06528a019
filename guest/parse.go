package guest

import (
	"strings"
	"syscall"
)

// maxMessage is the largest ctl message, in bytes. It is bigger than the
// host's 4 KiB because `start`/`exec` carry whole shell scripts and `env`
// carries values; it stays well below the 9P msize (see Serve), so one
// write(2) of a message is one Twrite.
const maxMessage = 64 << 10

// command is one parsed ctl message.
type command struct {
	verb string
	args []string
}

// parseMessage splits one ctl message into words. Rules (the host ctl
// grammar's, with one extension): words are separated by blanks (space,
// tab); a word may contain single-quoted parts in which blanks are
// literal and two single quotes stand for one (rc(1): a'b c'd is "ab cd"); one trailing
// newline is allowed. The extension: a quoted part may contain newlines
// and any other byte, so `exec` can carry a multi-line script. An
// unquoted newline anywhere else (a second message) is refused, as are
// NUL bytes (they cannot reach execve) and messages over maxMessage.
func parseMessage(msg []byte) (command, error) {
	if len(msg) > maxMessage {
		return command{}, errorf(syscall.E2BIG, "ctl: message too long (%d bytes, max %d)", len(msg), maxMessage)
	}
	s := strings.TrimSuffix(string(msg), "\n")
	var (
		words  []string
		b      strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0:
			return command{}, errorf(syscall.EINVAL, "ctl: NUL byte in message %s", quote(s))
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		case c == '\n' || c == '\r':
			return command{}, errorf(syscall.EINVAL, "ctl: more than one line %s", quote(s))
		case c == '\'':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == 0 {
					return command{}, errorf(syscall.EINVAL, "ctl: NUL byte in message %s", quote(s))
				}
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
				return command{}, errorf(syscall.EINVAL, "ctl: unterminated quote %s", quote(s))
			}
		default:
			inWord = true
			b.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, b.String())
	}
	if len(words) == 0 {
		return command{}, errorf(syscall.EINVAL, "ctl: empty message")
	}
	return command{verb: words[0], args: words[1:]}, nil
}

// Quote returns s as one ctl argument: unchanged if it needs no quotes,
// otherwise in single quotes with ' doubled. parseMessage gives s back.
// The host uses it to build `start` and `exec` messages.
func Quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\r'") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
