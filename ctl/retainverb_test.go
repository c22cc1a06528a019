package ctl

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestRetainVerb: retain on /ctl reads the rules back, sets the keys
// given (the others kept) as the flags do, and a pass under the new
// rules runs at once; bad input and other users get errno and text and
// change nothing.
func TestRetainVerb(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, newFakeRuntime())
	if got := do(t, p, "retain"); got != "keep=0 age=0\n" {
		t.Fatalf("retain = %q; want keep=0 age=0", got)
	}
	do(t, p, "new box")
	s := lookup(t, p, "box")
	for _, n := range []string{"s1", "s2", "s3"} {
		sdo(t, s, "snapshot "+n)
	}
	if got := do(t, p, "retain age=168h"); got != "keep=0 age=168h\n" {
		t.Fatalf("retain age=168h = %q", got)
	}
	if got := do(t, p, "retain keep=1"); got != "keep=1 age=168h\n" {
		t.Fatalf("retain keep=1 = %q; want the age kept", got)
	}
	if r := p.Retention(); r != (Retention{Keep: 1, MaxAge: 168 * time.Hour}) {
		t.Fatalf("Retention() = %+v", r)
	}
	// The verb kicked a pass: s1 and s2 go (s3 is the one box stands on).
	for deadline := time.Now().Add(30 * time.Second); !slices.Equal(snapNames(p), []string{"s3"}); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("snapshots after retain keep=1: %q; want s3", snapNames(p))
		}
	}
	for _, bad := range []struct{ in, frag string }{
		{"retain keep=-1", `"-1"`},
		{"retain keep=x age=1h", `"x"`},
		{"retain keep=1000001", "1000000"},
		{"retain age=1h keep=2x", `"2x"`},
		{"retain age=-5m", `"-5m"`},
		{"retain age=1000000h", "100 years"},
		{"retain age=soon", `"soon"`},
		{"retain keep", "retain"},
		{"retain size=3", "size"},
	} {
		_, err := p.Ctl(ctx(t), []byte(bad.in))
		wantErr(t, bad.in, err, syscall.EINVAL, bad.frag)
	}
	_, err := p.Ctl(as(t, alice), []byte("retain keep=5"))
	wantErr(t, "retain keep=5 as alice", err, syscall.EPERM, "root")
	if r := p.Retention(); r != (Retention{Keep: 1, MaxAge: 168 * time.Hour}) {
		t.Fatalf("refused retains changed the rules: %+v", r)
	}
	reply, err := p.Ctl(as(t, alice), []byte("retain"))
	if err != nil || reply != "keep=1 age=168h\n" {
		t.Fatalf("retain as alice = %q, %v; reading is anyone's", reply, err)
	}
	if got := do(t, p, "retain keep=0 age=0"); got != "keep=0 age=0\n" {
		t.Fatalf("retain keep=0 age=0 = %q", got)
	}
}
