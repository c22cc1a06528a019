package guest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

func TestParseEntropy(t *testing.T) {
	ok := strings.Repeat("0a", 32)
	if b, err := parseEntropy(ok); err != nil || !bytes.Equal(b, bytes.Repeat([]byte{10}, 32)) {
		t.Errorf("parseEntropy(32 bytes) = %x, %v", b, err)
	}
	if _, err := parseEntropy(strings.Repeat("ff", 256)); err != nil {
		t.Errorf("256 bytes: %v", err)
	}
	for name, in := range map[string]string{
		"short": strings.Repeat("0a", 31), "long": strings.Repeat("0a", 257),
		"odd": ok + "0", "not hex": "zz" + ok[2:], "empty": "",
	} {
		if _, err := parseEntropy(in); err == nil {
			t.Errorf("%s: parseEntropy(%q) = nil error", name, in)
		}
	}
}

// TestAgentEntropy: the verb hands the decoded bytes to the kernel op;
// bad input is refused with EINVAL before it.
func TestAgentEntropy(t *testing.T) {
	ts := newTestServer(t, Options{})
	var got [][]byte
	ts.srv.sys.addEntropy = func(b []byte) error { got = append(got, b); return nil }
	_, root := ts.dial()
	ctl := openFile(t, root, "ctl", p9.ReadWrite)
	mustWrite(t, ctl, "entropy "+strings.Repeat("7f", 40))
	if len(got) != 1 || !bytes.Equal(got[0], bytes.Repeat([]byte{0x7f}, 40)) {
		t.Errorf("applied %x", got)
	}
	if err := write(ctl, "entropy abc"); !errors.Is(err, linux.EINVAL) {
		t.Errorf("short entropy: %v", err)
	}
	if len(got) != 1 {
		t.Errorf("bad input applied: %x", got)
	}
}
