package netlab

import (
	"strings"
	"testing"
	"time"
)

// srvPy is put in a guest as /root/srv.py: a TCP server on port 8080
// answering each connection with "hello <argv[1]>".
const srvPy = `import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
while True:
    c, _ = s.accept()
    c.sendall(("hello %s\n" % sys.argv[1]).encode())
    c.close()
`

// TestNetworkGroup: sandbox-to-sandbox traffic only between members of
// one named group whose policies both allow it (issue 13). g1 and g2
// (group lab, each allowing the group's /24) reach each other at their
// member addresses; g3 (group lab, default deny) is not reached (its
// filter drops its own answer: the connection times out) and cannot
// reach (its filter resets its SYN); o1 (no group, default allow) and
// x1 (group other, default allow) cannot reach g2 (dropped: timeouts).
func TestNetworkGroup(t *testing.T) {
	need(t)
	d := startDaemon(t)
	t0 := time.Now()
	boxes := []struct{ id, args string }{
		{"g1", "group=lab net='allow 100.126.0.0/24'"},
		{"g2", "group=lab net='allow 100.126.0.0/24'"},
		{"g3", "group=lab"},
		{"o1", "net=allow"},
		{"x1", "group=other net=allow"},
	}
	// The first new builds the template's snapshot; the others restore it.
	d.mustSh(t, `echo "new `+boxes[0].id+` mem=96M `+boxes[0].args+`" > ctl`)
	parallel(1, len(boxes)-1, 4, func(i int) {
		if _, err := d.sh(`echo "new ` + boxes[i].id + ` mem=96M ` + boxes[i].args + `" > ctl`); err != nil {
			t.Errorf("new %s: %v", boxes[i].id, err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	member := map[string]string{}
	for _, b := range boxes {
		d.waitAgent(t, b.id)
		d.putConns(t, b.id)
		line := d.mustSh(t, "cat sandboxes/"+b.id+"/net/addr")
		t.Logf("$ cat sandboxes/%s/net/addr\n%s", b.id, line)
		f := strings.Fields(line)
		for _, kv := range f {
			if m, ok := strings.CutPrefix(kv, "member="); ok {
				member[b.id] = m
			}
		}
	}
	t.Logf("guests up in %s; member addresses %v", time.Since(t0).Round(time.Second), member)
	// g1 joined first; g2 and g3 joined concurrently, so either may
	// have taken .2: each has one of .2 and .3, not the same one.
	if member["g1"] != "100.126.0.1" {
		t.Errorf("g1: member address %q; want 100.126.0.1", member["g1"])
	}
	if g2, g3 := member["g2"], member["g3"]; g2 == g3 ||
		(g2 != "100.126.0.2" && g2 != "100.126.0.3") || (g3 != "100.126.0.2" && g3 != "100.126.0.3") {
		t.Errorf("g2, g3: member addresses %q, %q; want 100.126.0.2 and 100.126.0.3, one each", g2, g3)
	}
	if member["x1"] != "100.126.1.1" {
		t.Errorf("x1: member address %q; want 100.126.1.1 (the first of group other)", member["x1"])
	}
	if member["o1"] != "" {
		t.Errorf("o1 (no group) has member address %q", member["o1"])
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, id := range []string{"g1", "g2", "g3"} {
		d.startServer(t, id)
	}
	checks := []struct{ from, to, want string }{
		{"g1", "g2", "ok hello g2"},
		{"g1", "g3", "err timeout"}, // g3's filter drops its SYN-ACK
		{"g2", "g1", "ok hello g1"},
		{"g3", "g1", "err 111"},     // g3's own filter resets its SYN
		{"o1", "g2", "err timeout"}, // not a member: the host drops it
		{"x1", "g2", "err timeout"}, // another group: g2's namespace drops it
	}
	parallel(0, len(checks)-1, len(checks), func(i int) {
		c := checks[i]
		out, err := d.conns(c.from, member[c.to])
		t.Logf("%s: python3 /root/conns.py %s -> %q", c.from, member[c.to], out)
		if err != nil || strings.TrimSpace(out) != c.want {
			d.fail(c.from)
			d.fail(c.to)
			t.Errorf("%s -> %s (%s:8080): %q, %v; want %q", c.from, c.to, member[c.to], out, err, c.want)
		}
	})
	t.Logf("checked in %s", time.Since(t0).Round(time.Second))
}

// startServer starts srv.py in sandbox id's guest and waits until it
// answers on the guest's loopback.
func (d *daemon) startServer(t *testing.T, id string) {
	t.Helper()
	if err := writeFile(d, id, "root/srv.py", srvPy); err != nil {
		t.Fatal(err)
	}
	d.mustSh(t, "echo 'nohup python3 /root/srv.py "+id+" </dev/null >/dev/null 2>&1 &' > sandboxes/"+id+"/exec; cat sandboxes/"+id+"/exec")
	for i := 0; ; i++ {
		out, err := d.conns(id, "127.0.0.1")
		if err == nil && out == "ok hello "+id+"\n" {
			return
		}
		if i == 60 {
			d.fail(id)
			t.Fatalf("%s: srv.py not answering on the guest's loopback: %q, %v", id, out, err)
		}
		time.Sleep(time.Second)
	}
}
