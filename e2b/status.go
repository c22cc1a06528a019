package e2b

import (
	"strconv"
	"strings"
	"time"

	"sandfs/fs/client"
)

// sandboxStatus is a sandbox's status line (sandboxes/<id>/status):
//
//	id state template=<name> mem=<size> cpus=<n> world=<w> created=<unix> timeout=<dur> deadline=<unix|0> ...
type sandboxStatus struct {
	ID, State, Template string
	MemMB, CPUs         int
	Created, Deadline   time.Time
}

// parseStatus reads the fields it knows and ignores the others.
func parseStatus(line string) sandboxStatus {
	f := strings.Fields(line)
	var st sandboxStatus
	if len(f) > 1 {
		st.ID, st.State = f[0], f[1]
	}
	for _, kv := range f[min(2, len(f)):] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseInt(strings.TrimRight(v, "KMGkmg"), 10, 64)
		switch k {
		case "template":
			st.Template = v
		case "mem":
			st.MemMB = int(memMB(v))
		case "cpus":
			st.CPUs = int(n)
		case "created":
			st.Created = time.Unix(n, 0)
		case "deadline":
			if n > 0 {
				st.Deadline = time.Unix(n, 0)
			}
		}
	}
	return st
}

// memMB converts a size such as 512M or 1G to MiB.
func memMB(v string) int64 {
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimRight(v, "KMGkmg"), 10, 64)
	if err != nil {
		return 0
	}
	switch v[len(v)-1] {
	case 'G', 'g':
		return n << 10
	case 'K', 'k':
		return n >> 10
	case 'M', 'm':
		return n
	}
	return n >> 20
}

// readStatus reads sandbox id's status line from the tree.
func readStatus(c *client.Client, id string) (sandboxStatus, error) {
	b, err := c.ReadFile("sandboxes/" + id + "/status")
	if err != nil {
		return sandboxStatus{}, err
	}
	return parseStatus(strings.TrimSpace(string(b))), nil
}

// e2bState is the E2B state of a tree state: running and paused are
// E2B's; a sandbox in any other state is not one E2B shows ("").
func e2bState(state string) string {
	switch state {
	case "running", "paused":
		return state
	}
	return ""
}
