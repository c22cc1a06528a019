package ninep

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sandfs/ctl/cred"
)

// TestIdentity: a unix socket's client is its peer, with its groups; a
// token's is root; a pipe's nobody.
func TestIdentity(t *testing.T) {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cc, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	c, err := identity(sc, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.UID != uint32(os.Geteuid()) || c.GID != uint32(os.Getegid()) {
		t.Errorf("identity(unix) = %v; want uid %d gid %d", c, os.Geteuid(), os.Getegid())
	}
	want, _ := os.Getgroups()
	var got []int
	for _, g := range c.Groups() {
		got = append(got, int(g))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("identity(unix) groups = %v; want %v", got, want)
	}
	if c, _ := identity(sc, "s3cret-token-0123"); c.UID != 0 || c.GID != 0 {
		t.Errorf("identity(token) = %v; want root", c)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if c, _ := identity(p1, ""); c.Owner() != cred.Nobody.Owner() {
		t.Errorf("identity(pipe) = %v; want nobody", c)
	}
}
