package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// User is the uid and gid of the guest's default user, "user": E2B's
// commands run as it unless asked otherwise, and a sandbox's world shows
// its owner's files as this user's (fs/ctlfs ServeConn, ninep.IDMap).
var User = cred.Owner{UID: 1000, GID: 1000}

// The users sandfs-init makes sure exist: root and the E2B-style default
// user. Existing entries (by name) are left exactly as they are.
var defaultUsers = []account{
	{name: "root", uid: 0, gid: 0, home: "/root", gecos: "root"},
	{name: "user", uid: int(User.UID), gid: int(User.GID), home: "/home/user", gecos: "sandbox user"},
}

type account struct {
	name     string
	uid, gid int
	home     string
	gecos    string
}

// EnsureUsers adds root (0) and user (1000, home /home/user) to
// root/etc/{passwd,group,shadow} when their names are missing, and creates
// their home directories. It is idempotent: a name already present is
// never touched, lines it does not understand are kept verbatim, and each
// file is replaced atomically. A missing file is created. If uid or gid
// 1000 is already taken by another name, user is not added (an error says
// so) rather than creating a second name for that uid.
func EnsureUsers(root string) error {
	shell := "/bin/sh"
	if fi, err := os.Stat(filepath.Join(root, "bin/bash")); err == nil && !fi.IsDir() {
		shell = "/bin/bash"
	}
	var errs []error
	for _, a := range defaultUsers {
		if err := ensureUser(root, a, shell); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func ensureUser(root string, a account, shell string) error {
	passwd := filepath.Join(root, "etc/passwd")
	group := filepath.Join(root, "etc/group")
	shadow := filepath.Join(root, "etc/shadow")
	pw, err := readLines(passwd)
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	gr, err := readLines(group)
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	sh, err := readLines(shadow)
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	id := strconv.Itoa(a.uid)
	gid := strconv.Itoa(a.gid)
	if findField(pw, 0, a.name) < 0 {
		if i := findField(pw, 2, id); i >= 0 {
			return fmt.Errorf("users: uid %d already belongs to %q, not adding %q", a.uid, field(pw[i], 0), a.name)
		}
		if findField(gr, 0, a.name) < 0 {
			if i := findField(gr, 2, gid); i >= 0 {
				return fmt.Errorf("users: gid %d already belongs to group %q, not adding %q", a.gid, field(gr[i], 0), a.name)
			}
			gr = append(gr, fmt.Sprintf("%s:x:%d:", a.name, a.gid))
			if err := writeFileAtomic(group, joinLines(gr), 0o644); err != nil {
				return fmt.Errorf("users: %w", err)
			}
		}
		pw = append(pw, fmt.Sprintf("%s:x:%d:%d:%s:%s:%s", a.name, a.uid, a.gid, a.gecos, a.home, shell))
		if err := writeFileAtomic(passwd, joinLines(pw), 0o644); err != nil {
			return fmt.Errorf("users: %w", err)
		}
	}
	if findField(sh, 0, a.name) < 0 {
		// "*": no password can log in; processes are started by the agent.
		sh = append(sh, a.name+":*:19000:0:99999:7:::")
		if err := writeFileAtomic(shadow, joinLines(sh), 0o640); err != nil {
			return fmt.Errorf("users: %w", err)
		}
	}
	home := filepath.Join(root, a.home)
	if _, err := os.Lstat(home); errors.Is(err, os.ErrNotExist) {
		mode := os.FileMode(0o755)
		if a.uid == 0 {
			mode = 0o700
		}
		if err := os.MkdirAll(home, mode); err != nil {
			return fmt.Errorf("users: home: %w", err)
		}
		if err := os.Chown(home, a.uid, a.gid); err != nil {
			return fmt.Errorf("users: home: %w", err)
		}
	}
	return nil
}

// readLines returns the lines of a colon file; a missing file is empty.
func readLines(name string) ([]string, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

func joinLines(l []string) []byte { return []byte(strings.Join(l, "\n") + "\n") }

// field returns the i-th colon-separated field of line, or "".
func field(line string, i int) string {
	f := strings.Split(line, ":")
	if i < len(f) {
		return f[i]
	}
	return ""
}

// findField returns the index of the first line whose i-th field is v,
// skipping comments, or -1.
func findField(lines []string, i int, v string) int {
	for n, l := range lines {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if field(l, i) == v {
			return n
		}
	}
	return -1
}

// credential is who a process runs as.
type credential struct {
	uid, gid uint32
	groups   []uint32
	name     string // user name, or the number when given as one
	home     string
	shell    string
}

// lookupUser resolves a `user` argument against root/etc/passwd and
// root/etc/group: a name, or UID or UID:GID in decimal (which need no
// passwd entry; home is then the entry's if the uid has one, else "/").
// Unknown names fail with ENOENT.
func lookupUser(root, spec string) (credential, error) {
	pw, err := readLines(filepath.Join(root, "etc/passwd"))
	if err != nil {
		return credential{}, msg.Errorf(syscall.EIO, "user: %v", err)
	}
	var c credential
	line := -1
	if u, g, ok := parseIDs(spec); ok {
		c = credential{uid: u, gid: g, name: spec, home: "/", shell: "/bin/sh"}
		if i := findField(pw, 2, strconv.FormatUint(uint64(u), 10)); i >= 0 {
			line = i
			if !strings.Contains(spec, ":") {
				g, _ := strconv.ParseUint(field(pw[i], 3), 10, 32)
				c.gid = uint32(g)
			}
		}
	} else {
		line = findField(pw, 0, spec)
		if line < 0 {
			return credential{}, msg.Errorf(syscall.ENOENT, "user: no such user %s", msg.Cite(spec))
		}
		u, err1 := strconv.ParseUint(field(pw[line], 2), 10, 32)
		g, err2 := strconv.ParseUint(field(pw[line], 3), 10, 32)
		if err1 != nil || err2 != nil {
			return credential{}, msg.Errorf(syscall.EINVAL, "user: bad passwd entry for %s", msg.Cite(spec))
		}
		c = credential{uid: uint32(u), gid: uint32(g), name: spec}
	}
	if line >= 0 {
		c.name = field(pw[line], 0)
		if h := field(pw[line], 5); h != "" {
			c.home = h
		}
		if s := field(pw[line], 6); s != "" {
			c.shell = s
		}
		if c.home == "" {
			c.home = "/"
		}
		if c.shell == "" {
			c.shell = "/bin/sh"
		}
	}
	c.groups = []uint32{c.gid}
	gr, _ := readLines(filepath.Join(root, "etc/group"))
	for _, l := range gr {
		if strings.HasPrefix(l, "#") || line < 0 {
			continue
		}
		for _, m := range strings.Split(field(l, 3), ",") {
			if m == c.name {
				if g, err := strconv.ParseUint(field(l, 2), 10, 32); err == nil && uint32(g) != c.gid {
					c.groups = append(c.groups, uint32(g))
				}
			}
		}
	}
	return c, nil
}

func parseIDs(s string) (uid, gid uint32, ok bool) {
	us, gs, two := strings.Cut(s, ":")
	u, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return 0, 0, false
	}
	g := u
	if two {
		if g, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return 0, 0, false
		}
	}
	return uint32(u), uint32(g), true
}
