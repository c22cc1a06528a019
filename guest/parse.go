package guest

import "sandfs/ctl/msg"

// maxMessage is the largest ctl message, in bytes. It is bigger than the
// host's 4 KiB because `start`/`exec` carry whole shell scripts and `env`
// carries values; it stays well below the 9P msize (see Serve), so one
// write(2) of a message is one Twrite.
const maxMessage = 64 << 10

// rules are the message rules of the agent's ctl files: the host ctl
// grammar's (package msg), with Script rules so a quoted part may hold
// newlines and any other byte but NUL (`exec` carries a multi-line
// script; NUL cannot reach execve), and maxMessage. An unquoted newline
// (a second message) is still refused. msg.Quote builds arguments.
var rules = msg.Rules{Max: maxMessage, Script: true}
