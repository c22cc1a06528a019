package ctl

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// IDRange is a range of host ids, First to First+Count-1, each used as a
// uid and as the gid of the same number; its text form (a flag's value)
// is "first-last", e.g. "1879048192-1879113727".
type IDRange struct {
	First, Count int
}

// DefaultVMMIDs is where sandboxes' VMM uids come from unless the daemon
// is told otherwise (sandfs serve --vmm-uids): 65536 ids from 0x70000000,
// in the range systemd leaves unassigned (1879048192-2147483647,
// docs/UIDS-GIDS.md), above what useradd hands out as subordinate ids
// (SUB_UID_MAX 600100000) and the container range (524288-1879048191).
var DefaultVMMIDs = IDRange{First: 0x70000000, Count: 65536}

// IDRanger is optionally implemented by a Runtime whose machines each run
// as a host uid and gid of their own: IDs is the range to draw them from
// (Count 0: none). The Plane gives a sandbox the lowest id of the range
// that no recorded sandbox holds when it first starts (Spec.UID), keeps it
// in the sandbox's record, so that a restarted daemon does not hand it out
// again while the sandbox and the files that id owns in its Dir exist, and
// frees it with rm.
type IDRanger interface {
	IDs() IDRange
}

// String implements flag.Value.String.
func (r IDRange) String() string {
	if r.Count == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.First, r.First+r.Count-1)
}

// Set implements flag.Value.Set: "first-last", first at least 1000 (below
// are system accounts) and last below 2^31-1.
func (r *IDRange) Set(s string) error {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return fmt.Errorf("id range %q: want first-last, e.g. %s", s, DefaultVMMIDs)
	case first < 1000 || last < first || last >= 1<<31-1:
		return fmt.Errorf("id range %q: want 1000 <= first <= last < 2147483647", s)
	}
	*r = IDRange{First: first, Count: last - first + 1}
	return nil
}

// Contains reports whether id is in r.
func (r IDRange) Contains(id int) bool { return id >= r.First && id < r.First+r.Count }

// hostIDFiles are the databases whose ids a sandbox's must not share: a
// VMM running as a user's uid, or one of a user's subordinate ids, could
// reach that user's files or processes, and they its.
var hostIDFiles = []string{"/etc/passwd", "/etc/group", "/etc/subuid", "/etc/subgid"}

// overlaps lists the entries of the host's id databases (files, so tests
// can pass others) that fall in r, as "file: line".
func (r IDRange) overlaps(files []string) []string {
	var out []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := sc.Text()
			fields := strings.Split(line, ":")
			hit := false
			switch {
			case strings.HasSuffix(f, "/subuid"), strings.HasSuffix(f, "/subgid"):
				// name:first:count
				if len(fields) == 3 {
					first, err1 := strconv.Atoi(fields[1])
					n, err2 := strconv.Atoi(fields[2])
					hit = err1 == nil && err2 == nil && first < r.First+r.Count && r.First < first+n
				}
			default:
				// passwd name:x:uid:gid:..., group name:x:gid:members
				last := 3
				if strings.HasSuffix(f, "/group") {
					last = 2
				}
				for i := 2; i < len(fields) && i <= last; i++ {
					if id, err := strconv.Atoi(fields[i]); err == nil && r.Contains(id) {
						hit = true
					}
				}
			}
			if hit {
				out = append(out, f+": "+line)
			}
		}
		fh.Close()
	}
	return out
}

// giveUID gives s a uid from the runtime's IDs (IDRanger) unless it has
// one: the lowest that no other sandbox not removed holds (dead ones
// included: their run directories still hold files of theirs) and that
// no corrupt record's run directory holds. op of s held; takes Plane.mu,
// then each sandbox's mu.
func (p *Plane) giveUID(s *Sandbox, verb string) error {
	ranger, ok := p.rt.(IDRanger)
	if !ok || s.uid != 0 {
		return nil
	}
	ids := ranger.IDs()
	if ids.Count == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	used := map[int]bool{}
	for uid := range p.takenUIDs {
		used[uid] = true
	}
	for _, b := range p.boxes {
		if b != s {
			b.mu.Lock()
			used[b.uid] = true
			b.mu.Unlock()
		}
	}
	for id := ids.First; id < ids.First+ids.Count; id++ {
		if !used[id] {
			s.mu.Lock()
			s.uid = id
			s.mu.Unlock()
			return nil
		}
	}
	return Errorf(syscall.ENOSPC, "%s: no free uid in %s: each belongs to a sandbox (rm dead ones)", verb, ids)
}

// UID returns the host uid (and gid) the sandbox's machine runs as, 0
// if none (yet).
func (s *Sandbox) UID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uid
}
