package labnet

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestFieldsMatch(t *testing.T) {
	for _, tc := range []struct {
		f, w string
		want bool
	}{
		{"tcp 1.2.3.4:80 - allow 90", "tcp 1.2.3.4:80 - allow 90", true},
		{"tcp 1.2.3.4:80 - allow 90", "tcp 1.2.3.4:80 - allow *", true},
		{"tcp 1.2.3.4:80 - allow 0", "tcp 1.2.3.4:80 - allow *", false},
		{"tcp 1.2.3.4:80 - allow out=5", "tcp 1.2.3.4:80 - allow out=*", true},
		{"tcp 1.2.3.4:80 - allow out=0", "tcp 1.2.3.4:80 - allow out=*", false},
		{"tcp 1.2.3.4:80 - reset 90", "tcp 1.2.3.4:80 - allow *", false},
		{"tcp 1.2.3.4:80 - allow", "tcp 1.2.3.4:80 - allow *", false},
	} {
		if got := FieldsMatch(strings.Fields(tc.f), strings.Fields(tc.w)); got != tc.want {
			t.Errorf("FieldsMatch(%q, %q) = %v", tc.f, tc.w, got)
		}
	}
}

// TestReadAudit: a stream that ends (a plain file here) with wants left
// says so; one line may match one want only.
func TestReadAudit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit")
	lines := "t0 tcp a - allow 1\nt1 dns - x refused 0\n"
	if err := os.WriteFile(p, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	match := func(f, w []string) bool { return len(f) >= 5 && slices.Equal(f[1:5], w) }
	want := [][]string{{"tcp", "a", "-", "allow"}, {"dns", "-", "x", "refused"}, {"tcp", "a", "-", "allow"}}
	seen, missing, ended := ReadAudit(p, want, time.Minute, match)
	if len(seen) != 2 || !ended || len(missing) != 1 || !slices.Equal(missing[0], want[2]) {
		t.Errorf("ReadAudit = %q, %q, %v; want both lines, the second tcp want missing, ended", seen, missing, ended)
	}
	seen, missing, ended = ReadAudit(p, want[:2], time.Minute, match)
	if len(missing) != 0 || ended {
		t.Errorf("ReadAudit = %q, %q, %v; want every want found, before the end", seen, missing, ended)
	}
}

// TestDNS: an A record, a CNAME followed, NXDOMAIN for other names, and
// the names asked recorded until Forget.
func TestDNS(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	s := &DNS{Names: map[string]string{"a.test": "192.0.2.1", "c.test": "cname:a.test"}}
	go s.Serve(pc)
	ask := func(name string) (dnsmessage.RCode, []string) {
		t.Helper()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		c, err := net.Dial("udp4", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(q)
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil || m.ID != 7 {
			t.Fatalf("reply %v, id %d", err, m.ID)
		}
		var rrs []string
		for _, r := range m.Answers {
			rrs = append(rrs, r.Body.GoString())
		}
		return m.RCode, rrs
	}
	if rc, rrs := ask("a.test"); rc != dnsmessage.RCodeSuccess || len(rrs) != 1 || !strings.Contains(rrs[0], "192, 0, 2, 1") {
		t.Errorf("a.test: %v %q", rc, rrs)
	}
	if rc, rrs := ask("c.test"); rc != dnsmessage.RCodeSuccess || len(rrs) != 2 || !strings.Contains(rrs[0], "a.test.") {
		t.Errorf("c.test: %v %q", rc, rrs)
	}
	if rc, rrs := ask("no.test"); rc != dnsmessage.RCodeNameError || len(rrs) != 0 {
		t.Errorf("no.test: %v %q", rc, rrs)
	}
	if !s.WasAsked("c.test") || s.WasAsked("tcp:c.test") {
		t.Error("c.test not recorded as asked over UDP")
	}
	s.Forget()
	if s.WasAsked("a.test") {
		t.Error("a.test still recorded after Forget")
	}
}
