package guestlab

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sandfs/test/labnet"
)

// dnsPy resolves argv[1] with the guest's resolver (/etc/resolv.conf:
// the sandbox's, 169.254.68.5): "ok <address>" or "err <EAI code>".
const dnsPy = `import socket, sys
try:
    print("ok", socket.gethostbyname(sys.argv[1]))
except socket.gaierror as e:
    print("err", e.errno)
`

// tcpDNSPy asks the guest's resolver (169.254.68.5:53) for argv[1]'s A
// record over TCP: "ok <address>" (the last record's), or "rcode <n>".
const tcpDNSPy = `import socket, struct, sys
q = struct.pack(">6H", 0x5678, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in sys.argv[1].split(".")) + b"\0" + struct.pack(">2H", 1, 1)
s = socket.create_connection(("169.254.68.5", 53), timeout=10)
s.sendall(struct.pack(">H", len(q)) + q)
b = b""
while len(b) < 2 or len(b) < 2 + struct.unpack(">H", b[:2])[0]:
    c = s.recv(4096)
    if not c:
        break
    b += c
a = b[2:]
if a[3] & 15 == 0 and struct.unpack(">H", a[6:8])[0] > 0:
    print("ok", socket.inet_ntoa(a[-4:]))
else:
    print("rcode", a[3] & 15)
`

// rawQuery is an A query for example.test (id 0x1234), as rawDNSPy sends it.
var rawQuery = []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x04test\x00\x00\x01\x00\x01")

// rawDNSPy sends one A query for example.test straight to argv[1]:53
// over UDP and prints "answer" or "timeout" (3 s).
const rawDNSPy = `import socket, sys
q = bytes.fromhex("123401000001000000000000076578616d706c65047465737400000100 01".replace(" ", ""))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(q, (sys.argv[1], 53))
try:
    s.recv(512)
    print("answer")
except socket.timeout:
    print("timeout")
`

// spoofDNSPy sends one A query for argv[2] to the gateway's resolver
// (169.254.68.5:53) from source address argv[1], built by hand on a raw
// socket (the kernel fills the IP checksum and id; UDP checksum 0).
const spoofDNSPy = `import socket, struct, sys
src, name = sys.argv[1], sys.argv[2]
q = struct.pack(">6H", 0x4321, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">2H", 1, 1)
udp = struct.pack(">4H", 40000, 53, 8 + len(q), 0) + q
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton("169.254.68.5"))
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
s.sendto(ip + udp, ("169.254.68.5", 0))
print("sent")
`

// TestNetworkDNS: a sandbox with net='allow allowed.test; allow
// *.cname.test' resolves allowed.test through its own resolver, which
// asked the host's (a fake on the lab's loopback, --resolver), and the
// answer's address opens for TCP where it was refused before; a name
// behind a CNAME opens its target's address; another name gets NXDOMAIN
// and never reaches the host's resolver; a DNS server at an address the
// guest may reach (198.51.100.1:53, in the test's namespace) gets
// nothing from it: the guest's only name server is its own.
func TestNetworkDNS(t *testing.T) {
	need(t)
	srv := netServe(t)
	up := &labnet.DNS{Names: map[string]string{
		"allowed.test": "198.51.100.1", "a.cname.test": "cname:target.test", "target.test": "198.51.100.2",
		"other.test": "198.51.100.2",
	}}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go up.Serve(pc)
	tl, err := net.Listen("tcp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go up.ServeTCP(tl)
	// A rogue resolver the guest might try directly, in srv.
	rogue := &labnet.DNS{Names: map[string]string{"example.test": "192.0.2.1"}}
	done := make(chan net.PacketConn, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays in srv
		netns.Set(srv)
		c, err := net.ListenPacket("udp4", "198.51.100.1:53")
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	rc := <-done
	if rc == nil {
		t.FailNow()
	}
	t.Cleanup(func() { rc.Close() })
	go rogue.Serve(rc)
	// The same query from the lab's namespace is answered: the rogue
	// serves, so the guest's "timeout" below is its path being cut.
	if c, err := net.Dial("udp4", "198.51.100.1:53"); err != nil {
		t.Fatal(err)
	} else {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(rawQuery)
		if _, err := c.Read(make([]byte, 512)); err != nil {
			t.Fatalf("the rogue resolver does not answer the lab: %v", err)
		}
		c.Close()
		rogue.Forget()
	}

	t.Setenv("SANDFS_RESOLVER", pc.LocalAddr().String())
	d := startDaemon(t)
	d.mustSh(t, `echo "new nn net='allow allowed.test; allow *.cname.test'" > ctl`)
	d.waitAgent(t, "nn")
	for f, text := range map[string]string{"conn.py": connPy, "dns.py": dnsPy, "rawdns.py": rawDNSPy, "spoof.py": spoofDNSPy, "tcpdns.py": tcpDNSPy} {
		if err := os.WriteFile(filepath.Join(d.mnt, "sandboxes/nn/fs/root", f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(cmd string) string {
		return strings.TrimSpace(d.mustSh(t, "echo '"+cmd+"' > sandboxes/nn/exec; cat sandboxes/nn/exec"))
	}
	for _, c := range []struct{ cmd, want string }{
		{"python3 /root/conn.py 198.51.100.1 8080", "err 111"},
		{"python3 /root/dns.py allowed.test", "ok 198.51.100.1"},
		{"python3 /root/conn.py 198.51.100.1 8080", "ok hello 198.51.100.1"},
		{"python3 /root/conn.py 198.51.100.2 8080", "err 111"},
		{"python3 /root/dns.py a.cname.test", "ok 198.51.100.2"},
		{"python3 /root/conn.py 198.51.100.2 8080", "ok hello 198.51.100.2"},
		{"python3 /root/dns.py other.test", "err -2"},
		{"python3 /root/tcpdns.py allowed.test", "ok 198.51.100.1"}, // DNS over TCP, forwarded over TCP
		{"python3 /root/tcpdns.py other.test", "rcode 3"},
		{"python3 /root/rawdns.py 198.51.100.1", "timeout"},
	} {
		if got := run(c.cmd); got != c.want {
			t.Errorf("%s: %q; want %q", c.cmd, got, c.want)
		}
	}
	d.auditHas(t, "nn",
		[]string{"tcp", "198.51.100.1:8080", "-", "reset", "*"},
		[]string{"dns", "198.51.100.1", "allowed.test", "answered", "*"},
		[]string{"tcp", "198.51.100.1:8080", "allowed.test", "allow", "*"},
		[]string{"dns", "198.51.100.2", "a.cname.test", "answered", "*"},
		[]string{"tcp", "198.51.100.2:8080", "a.cname.test", "allow", "*"},
		[]string{"dns", "-", "other.test", "refused", "*"})
	if up.WasAsked("other.test") || up.WasAsked("tcp:other.test") {
		t.Error("the host's resolver was asked for other.test, a name the policy does not allow")
	}
	if !up.WasAsked("tcp:allowed.test") {
		t.Error("a query over TCP was not forwarded over TCP")
	}

	// A forged source: the namespace must not take it (its answer would
	// leave through up0 unmasqueraded, past the policy). The same query
	// from the guest's own address is the control.
	if got := run("python3 /root/spoof.py 10.77.0.1 forged.cname.test"); got != "sent" {
		t.Fatalf("spoof.py: %q", got)
	}
	if got := run("python3 /root/spoof.py 169.254.68.6 own.cname.test"); got != "sent" {
		t.Fatalf("spoof.py: %q", got)
	}
	for i := 0; i < 100 && !up.WasAsked("own.cname.test"); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if !up.WasAsked("own.cname.test") {
		t.Error("a hand-built query from the guest's own address did not reach the resolver (the control failed)")
	}
	if up.WasAsked("forged.cname.test") {
		t.Error("a query from a forged source address reached the sandbox's resolver")
	}
	if rogue.WasAsked("example.test") {
		t.Error("the guest reached a resolver other than its own")
	}
}
