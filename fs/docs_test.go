package fs_test

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

// transcript is one ```console block of docs/filesystem.md.
type transcript struct {
	line  int  // of the opening fence
	lab   bool // needs a booted guest: left to the lab
	steps []step
}

// step is one "$ command" and the lines it prints (stdout and stderr).
type step struct {
	cmd  string
	want []string
}

// parseTranscripts returns the console blocks of a Markdown file.
func parseTranscripts(t *testing.T, path string) []transcript {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []transcript
	var cur *transcript
	lab := false // the block follows a "<!-- transcript: lab -->" line
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "<!-- transcript: lab -->":
			lab = true
			continue
		case cur == nil && strings.TrimSpace(line) == "```console":
			cur = &transcript{line: n, lab: lab}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(line, "$ "):
			cur.steps = append(cur.steps, step{cmd: line[2:]})
		case cur != nil && len(cur.steps) > 0:
			s := &cur.steps[len(cur.steps)-1]
			s.want = append(s.want, line)
		}
		if cur == nil && strings.TrimSpace(line) != "" {
			lab = false
		}
	}
	return out
}

// matchLine compares one output line with its documented form, where *
// stands for any text.
func matchLine(want, got string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(want), `\*`, `.*`) + "$"
	return regexp.MustCompile(re).MatchString(got)
}

var bashLine = regexp.MustCompile(`^bash: line \d+: `)

// TestDocTranscripts runs every console transcript of docs/filesystem.md,
// verbatim, with bash in a FUSE mount of a fresh tree (fake runtime), and
// compares what each command prints. Error lines are compared as an
// interactive bash prints them ("bash: echo: ...", without "line N:").
func TestDocTranscripts(t *testing.T) {
	needFUSE(t)
	ts := parseTranscripts(t, "../docs/filesystem.md")
	if len(ts) == 0 {
		t.Fatal("no console transcripts in docs/filesystem.md")
	}
	for _, tr := range ts {
		t.Run(fmt.Sprintf("line%d", tr.line), func(t *testing.T) {
			if tr.lab {
				t.Skip("needs a booted guest (<!-- transcript: lab -->)")
			}
			e := newEnv(t, "")
			dir := mountFUSE(t, e.tree.Root()).dir
			var script strings.Builder
			// bash changes into the mount itself: a child that chdirs
			// into this process's own FUSE mount between fork and exec
			// can deadlock the process (the vforking thread keeps its P,
			// so a stop-the-world never completes and nobody answers
			// the child's FUSE request).
			fmt.Fprintf(&script, "exec 2>&1\ncd %q || exit 1\n", dir)
			for i, s := range tr.steps {
				fmt.Fprintf(&script, "echo '@@%d@@'\n%s\n", i, strings.ReplaceAll(s.cmd, "/mnt/sandfs", dir))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
			cmd.Dir = os.TempDir()
			out, err := cmd.Output()
			if ctx.Err() != nil {
				t.Fatalf("transcript timed out; output so far:\n%s", out)
			}
			_ = err // the last command's status is part of the transcript
			got := map[int][]string{}
			k := -1
			for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
				var n int
				if _, err := fmt.Sscanf(l, "@@%d@@", &n); err == nil && strings.HasPrefix(l, "@@") {
					k = n
					got[k] = []string{}
					continue
				}
				l = bashLine.ReplaceAllString(l, "bash: ")
				l = strings.ReplaceAll(l, dir, "/mnt/sandfs")
				got[k] = append(got[k], l)
			}
			for i, s := range tr.steps {
				g := got[i]
				ok := len(g) == len(s.want)
				for j := 0; ok && j < len(g); j++ {
					ok = matchLine(s.want[j], g[j])
				}
				if !ok {
					t.Errorf("$ %s\ngot:\n%s\nwant:\n%s", s.cmd, strings.Join(g, "\n"), strings.Join(s.want, "\n"))
				}
			}
		})
	}
}
