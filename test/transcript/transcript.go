// Package transcript runs the console transcripts of the project's docs as
// tests, so that every documented command prints what the docs say. A
// transcript is a ```console block of $-prefixed commands followed by the
// lines they print; in the expected lines `*` stands for any text (pids,
// times). A block preceded by the line `<!-- transcript: lab -->` needs
// booted guests: fs's tests run the others against a fake runtime, and
// test/guestlab runs the lab ones against a real daemon.
package transcript

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Transcript is one ```console block.
type Transcript struct {
	Line  int  // of the opening fence
	Lab   bool // preceded by <!-- transcript: lab -->
	Steps []Step
}

// Step is one "$ command" and the lines it prints (stdout and stderr).
type Step struct {
	Cmd  string
	Want []string
}

// MountPoint is the path the docs use for the tree; Run replaces it with
// the real mount.
const MountPoint = "/mnt/sandfs"

// Parse returns the console blocks of a Markdown file.
func Parse(path string) ([]Transcript, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Transcript
	var cur *Transcript
	lab := false // the block follows a "<!-- transcript: lab -->" line
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "<!-- transcript: lab -->":
			lab = true
			continue
		case cur == nil && strings.TrimSpace(line) == "```console":
			cur = &Transcript{Line: n, Lab: lab}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(line, "$ "):
			cur.Steps = append(cur.Steps, Step{Cmd: line[2:]})
		case cur != nil && len(cur.Steps) > 0:
			s := &cur.Steps[len(cur.Steps)-1]
			s.Want = append(s.Want, line)
		}
		if cur == nil && strings.TrimSpace(line) != "" {
			lab = false
		}
	}
	return out, sc.Err()
}

// MatchLine compares one output line with its documented form, where *
// stands for any text.
func MatchLine(want, got string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(want), `\*`, `.*`) + "$"
	return regexp.MustCompile(re).MatchString(got)
}

var bashLine = regexp.MustCompile(`^bash: line \d+: `)

// Run runs tr's commands, verbatim, in one bash started in dir (the mount,
// which stands for MountPoint) with env added to this process's
// environment, and reports every step whose output differs. Error lines
// are compared as an interactive bash prints them ("bash: echo: ...",
// without "line N:").
func Run(t testing.TB, tr Transcript, dir string, env []string, timeout time.Duration) {
	t.Helper()
	var script strings.Builder
	// bash changes into the mount itself: a child that chdirs into this
	// process's own FUSE mount between fork and exec can deadlock the
	// process (the vforking thread keeps its P, so a stop-the-world never
	// completes and nobody answers the child's FUSE request).
	fmt.Fprintf(&script, "exec 2>&1\ncd %q || exit 1\n", dir)
	for i, s := range tr.Steps {
		fmt.Fprintf(&script, "echo '@@%d@@'\n%s\n", i, strings.ReplaceAll(s.Cmd, MountPoint, dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, _ := cmd.Output() // the last command's status is part of the transcript
	if ctx.Err() != nil {
		t.Fatalf("transcript at line %d timed out; output so far:\n%s", tr.Line, out)
	}
	got := map[int][]string{}
	k := -1
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "@@%d@@", &n); err == nil && strings.HasPrefix(l, "@@") {
			k = n
			got[k] = []string{}
			continue
		}
		l = strings.TrimSuffix(l, "\r") // as a terminal shows it (the serial console ends lines with CRLF)
		l = bashLine.ReplaceAllString(l, "bash: ")
		l = strings.ReplaceAll(l, dir, MountPoint)
		got[k] = append(got[k], l)
	}
	for i, s := range tr.Steps {
		g := got[i]
		ok := len(g) == len(s.Want)
		for j := 0; ok && j < len(g); j++ {
			ok = MatchLine(s.Want[j], g[j])
		}
		if !ok {
			t.Errorf("line %d: $ %s\ngot:\n%s\nwant:\n%s", tr.Line, s.Cmd, strings.Join(g, "\n"), strings.Join(s.Want, "\n"))
		}
	}
}
