package labnet

import (
	"bufio"
	"os/exec"
	"strings"
	"time"
)

// ReadAudit reads the net/audit stream at path with dd until, for each
// of want, a line's fields match it (match(fields, w)), or until limit
// has passed; it returns the lines read, the wants no line matched, and
// whether the stream ended first. dd is killed then: a read blocked in
// the stream ends on the FUSE interrupt (a Go reader would keep its file
// open: Close waits for a blocked read). Not busybox cat: its
// sendfile(2) holds the output pipe while the next read blocks, so the
// lines already read stay in the pipe (docs/filesystem.md, exec).
func ReadAudit(path string, want [][]string, limit time.Duration, match func(fields, w []string) bool) (seen []string, missing [][]string, ended bool) {
	missing = append(missing, want...)
	cmd := exec.Command("dd", "if="+path, "bs=65536")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return []string{"dd: " + err.Error()}, missing, true
	}
	if err := cmd.Start(); err != nil {
		return []string{"dd: " + err.Error()}, missing, true
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for len(missing) > 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				return seen, missing, true
			}
			seen = append(seen, l)
			f := strings.Fields(l)
			for i, w := range missing {
				if match(f, w) {
					missing = append(missing[:i], missing[i+1:]...)
					break
				}
			}
		case <-timer.C:
			return seen, missing, false
		}
	}
	return seen, missing, false
}

// FieldsMatch: f and w are equal, "P*" in w matching any field that
// starts with P but is not P0 ("*": any but "0").
func FieldsMatch(f, w []string) bool {
	if len(f) != len(w) {
		return false
	}
	for i := range f {
		p, star := strings.CutSuffix(w[i], "*")
		if w[i] != f[i] && (!star || !strings.HasPrefix(f[i], p) || f[i] == p+"0") {
			return false
		}
	}
	return true
}
