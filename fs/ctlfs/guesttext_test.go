package ctlfs

import "testing"

func TestGuestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"4 exited code=0 pid=212\n", "4 exited code=0 pid=212"},
		{"cwd: no such directory \"/nope\"", "cwd: no such directory \"/nope\""},
		{"two\nlines", `two\x0alines`},
		{"\x1b]0;owned\x07title", `\x1b]0;owned\x07title`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"C1 \u009b csi", `C1 \xc2\x9b csi`},
		{"ünïcödé ok", "ünïcödé ok"},
	} {
		if got := guestText([]byte(c.in)); got != c.want {
			t.Errorf("guestText(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}
