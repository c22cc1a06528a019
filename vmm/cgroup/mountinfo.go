package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Mount is one cgroup file system in a mount table.
type Mount struct {
	Point    string // mount point
	Root     string // the cgroup at the mount's root (relative to the cgroup namespace's root)
	Version  int    // 1 (file system type "cgroup") or 2 ("cgroup2")
	ReadOnly bool   // mounted read-only (the per-mount "ro" option)
	// Controllers are, for v1, the controllers bound to the hierarchy (its
	// super options, e.g. "cpu", "cpuacct"); for v2, the ones its root
	// offers (cgroup.controllers, which ParseMountinfo cannot see: Detect
	// fills them in).
	Controllers []string
}

// v1Flags are cgroup v1 super options that are not controllers
// (kernel/cgroup/cgroup-v1.c, cgroup1_parse_param).
var v1Flags = []string{"rw", "ro", "none", "all", "noprefix", "clone_children", "cpuset_v2_mode", "xattr", "favordynmods", "nofavordynmods"}

// ParseMountinfo returns the cgroup and cgroup2 mounts of a
// /proc/<pid>/mountinfo text, in table order. Each line is (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)     (10)       (11)
//
// mount ID, parent ID, major:minor, root, mount point, mount options,
// optional fields ending with "-", file system type, source, super options.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			return nil, fmt.Errorf("mountinfo: line %d: malformed %q", n, line)
		}
		var m Mount
		switch f[sep+1] {
		case "cgroup":
			m.Version = 1
		case "cgroup2":
			m.Version = 2
		default:
			continue
		}
		m.Root, m.Point = unescape(f[3]), unescape(f[4])
		m.ReadOnly = slices.Contains(strings.Split(f[5], ","), "ro")
		if m.Version == 1 {
			for _, o := range strings.Split(f[sep+3], ",") {
				if o != "" && !strings.Contains(o, "=") && !slices.Contains(v1Flags, o) {
					m.Controllers = append(m.Controllers, o)
				}
			}
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

// unescape decodes the octal escapes (\040 for a blank, \011, \012, \134)
// that the kernel writes in mountinfo paths (fs/proc_namespace.c,
// show_mountinfo → seq_path_root with " \t\n\\").
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
