package ctl

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"sandfs/ctl/cred"
	"sandfs/netpolicy"
)

// TestNewNet: new's net= is parsed whole and kept as canonical text,
// handed to the runtime in Spec.Net; bad text is EINVAL and creates
// nothing.
func TestNewNet(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	newPolicies(t, p, rt, []newPolicy{
		{"new a", "default deny\n"},
		{"new b net=deny", "default deny\n"},
		{"new c net=allow", "default allow\n"},
		{"new d net='deny 10.1.0.0/16; allow 10.0.0.0/8;allow example.com'", "default deny\nallow 10.0.0.0/8\ndeny 10.1.0.0/16\nallow example.com\n"},
	})
	for _, m := range []string{"new e net=permit", "new e net='allow 10.0.0.1/8'", "new e net='deny example.com'"} {
		if _, err := p.Ctl(ctx(t), []byte(m)); Errno(err) != syscall.EINVAL {
			t.Errorf("Ctl(%q) = %v; want EINVAL", m, err)
		}
	}
	if _, err := p.Lookup("e"); err == nil {
		t.Error("a bad net= created sandbox e")
	}
}

// newPolicy is a one-letter sandbox's new message and the policy it
// must start with.
type newPolicy struct{ msg, want string }

// newPolicies writes each new message to p and checks the sandbox's
// policy and the one rt was given (Spec.Net; "" is default deny).
func newPolicies(t *testing.T, p *Plane, rt *fakeRuntime, cases []newPolicy) {
	t.Helper()
	for _, c := range cases {
		do(t, p, c.msg)
		s, err := p.Lookup(c.msg[4:5])
		if err != nil {
			t.Fatal(err)
		}
		if got := s.NetPolicy(); got != c.want {
			t.Errorf("%s: NetPolicy() = %q; want %q", c.msg, got, c.want)
		}
		if got := rt.lastSpec().Net; got != c.want && !(got == "" && c.want == "default deny\n") {
			t.Errorf("%s: Spec.Net = %q; want %q", c.msg, got, c.want)
		}
	}
}

// netMachine is a fake machine with a network: SetPolicy fails with
// fail, else takes the policy.
type netMachine struct {
	*fakeMachine
	policy *netpolicy.Policy
	fail   error
	audit  func(string)
	owner  uint32 // the last Expose's
	ports  map[uint16]string
}

func (m *netMachine) SetPolicy(p *netpolicy.Policy) error {
	if m.fail != nil {
		return m.fail
	}
	m.policy = p
	return nil
}

func (m *netMachine) Policy() *netpolicy.Policy { return m.policy }

func (m *netMachine) SetAudit(fn func(string)) { m.audit = fn }

func (m *netMachine) Expose(p uint16, owner uint32, prefer string) (string, error) {
	m.owner = owner
	if m.ports == nil {
		m.ports = map[uint16]string{}
	}
	if prefer == "" {
		prefer = fmt.Sprintf("127.0.0.1:%d", 40000+int(p))
	}
	m.ports[p] = prefer
	return prefer, nil
}
func (m *netMachine) Unexpose(p uint16) error { delete(m.ports, p); return nil }
func (m *netMachine) Ports() string {
	s := ""
	for p, a := range m.ports {
		s += fmt.Sprintf("%d %s\n", p, a)
	}
	return s
}

// Reattach finds a live machine again, as a new netMachine (a restarted
// daemon's network has no exposures until the plane gives them).
func (r *netRuntime) Reattach(ctx context.Context, s Spec) (Machine, error) {
	if m := r.machine(s.ID); m != nil && !m.ended() {
		p, _ := netpolicy.Parse([]byte(s.Net))
		r.m = &netMachine{fakeMachine: m, policy: p}
		return r.m, nil
	}
	return nil, errors.New("no such machine")
}

// TestNetPortsKept: an exposure is recorded, and a restarted plane's
// adopted machine gets it again on the address it had; an unexposed
// port is not given again.
func TestNetPortsKept(t *testing.T) {
	dir := t.TempDir()
	rt := &netRuntime{fakeRuntime: newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a")
	s, _ := p.Lookup("a")
	for _, m := range []string{"expose 8000", "expose 9000", "unexpose 9000"} {
		if err := s.NetPortsCtl(ctx(t), []byte(m)); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	p.Close()
	p2, _ := openPlane(t, dir, rt)
	s2, _ := p2.Lookup("a")
	if got := s2.NetPorts(); got != "8000 127.0.0.1:48000\n" {
		t.Errorf("net/ports after a restart %q; want 8000 on its old address", got)
	}
	if err := s2.NetPortsCtl(ctx(t), []byte("unexpose 8000")); err != nil {
		t.Fatal(err)
	}
	p2.Close()
	p3, _ := openPlane(t, dir, rt)
	if got := lookup(t, p3, "a").NetPorts(); got != "" {
		t.Errorf("net/ports after unexpose and a restart %q; want none", got)
	}
}

type netRuntime struct {
	*fakeRuntime
	m *netMachine
}

func (r *netRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	m, err := r.fakeRuntime.Start(ctx, s)
	if err != nil {
		return nil, err
	}
	p, _ := netpolicy.Parse([]byte(s.Net))
	r.m = &netMachine{fakeMachine: m.(*fakeMachine), policy: p}
	return r.m, nil
}

// TestSetNetPolicy: a write of net/policy puts the policy in force on
// the machine and in the record (a restarted plane has it); bad text, or
// a machine that refuses it, changes nothing and leaves the text in err.
func TestSetNetPolicy(t *testing.T) {
	dir := t.TempDir()
	rt := &netRuntime{fakeRuntime: newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a net='allow 10.0.0.0/8'")
	s, _ := p.Lookup("a")
	if err := s.SetNetPolicy(ctx(t), []byte("default deny\nallow 192.0.2.0/24\n# web\n")); err != nil {
		t.Fatal(err)
	}
	const want = "default deny\nallow 192.0.2.0/24\n"
	if got := rt.m.policy.String(); got != want {
		t.Errorf("machine's policy %q; want %q", got, want)
	}
	for _, c := range []struct {
		text  string
		fail  error
		errno syscall.Errno
		err   string
	}{
		{"permit 10.0.0.1\n", nil, syscall.EINVAL, `policy: line 1: unknown verb "permit"`},
		{"allow 10.0.0.0/8\n", Errorf(syscall.ENOSPC, "trie full"), syscall.ENOSPC, "policy: trie full"},
	} {
		rt.m.fail = c.fail
		err := s.SetNetPolicy(ctx(t), []byte(c.text))
		if Errno(err) != c.errno || s.Err() != c.err {
			t.Errorf("SetNetPolicy(%q) = %v, err file %q; want %v, %q", c.text, err, s.Err(), c.errno, c.err)
		}
		if got := s.NetPolicy(); got != want {
			t.Errorf("after a failed SetNetPolicy(%q): %q; want %q", c.text, got, want)
		}
	}
	p.Close()
	p2, _ := openPlane(t, dir, newFakeRuntime())
	s2, err := p2.Lookup("a")
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.NetPolicy(); got != want {
		t.Errorf("after a restart: %q; want %q", got, want)
	}
	if !errors.Is(s2.SetNetPolicy(ctx(t), []byte("default allow")), nil) {
		t.Error("a dead sandbox's policy write failed")
	}
}

// TestNetPortsCtl: net/ports takes expose and unexpose of a port
// 1..65535 on a running sandbox with a network; anything else is EINVAL
// (with the text in err), a sandbox that is not running EBUSY.
func TestNetPortsCtl(t *testing.T) {
	rt := &netRuntime{fakeRuntime: newFakeRuntime()}
	p, _ := openPlane(t, t.TempDir(), rt)
	if _, err := p.Ctl(as(t, cred.Cred{UID: 1000, GID: 1000}), []byte("new a")); err != nil {
		t.Fatal(err)
	}
	s, _ := p.Lookup("a")
	for _, c := range []struct {
		msg   string
		errno syscall.Errno
	}{
		{"expose 8000\n", 0},
		{"unexpose 8000", 0},
		{"expose 0", syscall.EINVAL},
		{"expose 65536", syscall.EINVAL},
		{"expose", syscall.EINVAL},
		{"open 80", syscall.EINVAL},
		{"expose 80 81", syscall.EINVAL},
	} {
		err := s.NetPortsCtl(ctx(t), []byte(c.msg))
		if c.errno == 0 && err != nil || c.errno != 0 && Errno(err) != c.errno {
			t.Errorf("NetPortsCtl(%q) = %v; want errno %v", c.msg, err, c.errno)
		}
	}
	if rt.m.owner != 1000 {
		t.Errorf("exposed for uid %d; want the owner's, 1000", rt.m.owner)
	}
	do(t, p, "kill a")
	if err := s.NetPortsCtl(ctx(t), []byte("expose 80")); Errno(err) != syscall.EBUSY {
		t.Errorf("expose on a dead sandbox: %v; want EBUSY", err)
	}
}
