package ctlfs

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// guestText turns bytes a guest sent for display in the daemon's own
// files (err, execstatus) into one line: surrounding space trimmed,
// newlines, other control characters and invalid UTF-8 escaped as \xNN,
// so that `cat err` shows text, never terminal escapes or extra lines.
func guestText(b []byte) string {
	b = []byte(strings.TrimSpace(string(b)))
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if (r == utf8.RuneError && size <= 1) || unicode.IsControl(r) {
			for _, c := range b[:max(size, 1)] {
				fmt.Fprintf(&sb, `\x%02x`, c)
			}
		} else {
			sb.Write(b[:size])
		}
		b = b[max(size, 1):]
	}
	return sb.String()
}
