package guest

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sandfs/ctl/msg"
	"sandfs/vmm/virtio/vsock/hybrid"
)

func TestParseCmdline(t *testing.T) {
	c, errs := ParseCmdline("console=ttyS0 root=/dev/vda sandfs.ip=10.0.2.15/24 sandfs.gw=10.0.2.2 sandfs.dns=1.1.1.1,8.8.8.8 sandfs.hostname=box-1 sandfs.time=1700000000123456789 sandfs.port=1024 sandfs.mtu=1400 quiet\n")
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if c.IP.String() != "10.0.2.15/24" || !c.GW.Equal(net.ParseIP("10.0.2.2")) || len(c.DNS) != 2 ||
		c.Hostname != "box-1" || !c.Time.Equal(time.Unix(0, 1700000000123456789)) || c.Port != 1024 || c.MTU != 1400 || c.Iface != "eth0" {
		t.Errorf("ParseCmdline = %+v", c)
	}
	for _, bad := range []string{"sandfs.ip=10.0.2.15", "sandfs.gw=x", "sandfs.dns=1.1.1.1,nope", "sandfs.hostname=-x", "sandfs.time=abc", "sandfs.bogus=1", "sandfs.ip"} {
		if _, errs := ParseCmdline(bad); len(errs) != 1 {
			t.Errorf("ParseCmdline(%q): %d errors, want 1", bad, len(errs))
		}
	}
	c, _ = ParseCmdline("")
	if c.Port != hybrid.AgentPort || c.IP != nil || !c.Time.IsZero() {
		t.Errorf("defaults: %+v", c)
	}
}

// TestParseMessage checks the agent's message rules (Script rules,
// 64 KiB); the grammar itself is tested in package msg.
func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"start ls -l\n", []string{"start", "ls", "-l"}, ""},
		{"exec 'echo a b'", []string{"exec", "echo a b"}, ""},
		{"exec 'it''s'", []string{"exec", "it's"}, ""},
		{"env a'b c'd", []string{"env", "ab cd"}, ""},
		{"exec 'line1\nline2'\n", []string{"exec", "line1\nline2"}, ""},
		{"start x ''", []string{"start", "x", ""}, ""},
		{"  size\t30  100 ", []string{"size", "30", "100"}, ""},
		{"", nil, "ctl: empty message"},
		{"\n", nil, "ctl: empty message"},
		{"a\nb", nil, `ctl: more than one line "a\nb"`},
		{"a 'b", nil, `ctl: unterminated quote "a 'b"`},
		{"a \x00", nil, `ctl: NUL byte in message "a \x00"`},
		{strings.Repeat("x", maxMessage+1), nil, "ctl: message too long (65537 bytes, max 65536)"},
	} {
		got, err := rules.Split([]byte(tc.in))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Split(%.20q) = %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, s := range []string{"", "a", "a b", "it's", "x\ny", "'"} {
		words, err := rules.Split([]byte("v " + msg.Quote(s)))
		if err != nil || len(words) != 2 || words[1] != s {
			t.Errorf("Quote(%q) does not round-trip: %q %v", s, words, err)
		}
	}
}

func TestEnsureUsers(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	etc := filepath.Join(root, "etc")
	os.MkdirAll(etc, 0o755)
	passwd := "# comment kept\nroot:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nweird line kept\n"
	os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644)
	os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\n"), 0o644)
	// no shadow at all
	if err := EnsureUsers(root); err != nil {
		t.Fatal(err)
	}
	read := func(n string) string { b, _ := os.ReadFile(filepath.Join(etc, n)); return string(b) }
	p1, g1, s1 := read("passwd"), read("group"), read("shadow")
	if !strings.HasPrefix(p1, passwd) || !strings.HasSuffix(p1, "user:x:1000:1000:sandbox user:/home/user:/bin/sh\n") {
		t.Errorf("passwd:\n%s", p1)
	}
	if g1 != "root:x:0:\nuser:x:1000:\n" {
		t.Errorf("group:\n%s", g1)
	}
	if !strings.Contains(s1, "root:*:") || !strings.Contains(s1, "user:*:") {
		t.Errorf("shadow:\n%s", s1)
	}
	if fi, err := os.Stat(filepath.Join(etc, "shadow")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("shadow mode: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "home/user")); err != nil || !fi.IsDir() {
		t.Errorf("home: %v", err)
	}
	// Idempotent: a second run changes nothing.
	if err := EnsureUsers(root); err != nil {
		t.Fatal(err)
	}
	if read("passwd") != p1 || read("group") != g1 || read("shadow") != s1 {
		t.Error("second EnsureUsers changed the files")
	}
	// lookupUser reads what EnsureUsers wrote.
	c, err := lookupUser(root, "user")
	if err != nil || c.uid != 1000 || c.gid != 1000 || c.home != "/home/user" {
		t.Errorf("lookupUser(user) = %+v, %v", c, err)
	}

	// uid 1000 taken by another name: user is not added, an error says why.
	root2 := t.TempDir()
	os.MkdirAll(filepath.Join(root2, "etc"), 0o755)
	os.WriteFile(filepath.Join(root2, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nubuntu:x:1000:1000::/home/ubuntu:/bin/sh\n"), 0o644)
	err = EnsureUsers(root2)
	if err == nil || !strings.Contains(err.Error(), `uid 1000 already belongs to "ubuntu"`) {
		t.Errorf("EnsureUsers with uid 1000 taken: %v", err)
	}
}

func TestSetHostnameFiles(t *testing.T) {
	// Only the file part; sethostname(2) itself is for the lab test.
	root := t.TempDir()
	if err := writeFileAtomic(filepath.Join(root, "etc/hostname"), []byte("box\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/hostname"))
	if string(b) != "box\n" {
		t.Errorf("hostname file %q", b)
	}
}
