package transcript

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	md := "intro\n\n```console\n$ echo a\na\n$ true\n```\n\n<!-- transcript: lab -->\n```console\n$ uname\nLinux\n```\n"
	p := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	ts, err := Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Lab || !ts[1].Lab || len(ts[0].Steps) != 2 || ts[0].Steps[0].Want[0] != "a" || ts[1].Line != 10 {
		t.Fatalf("parsed %+v", ts)
	}
}

func TestMatchLine(t *testing.T) {
	if !MatchLine("1 exited code=0 pid=*", "1 exited code=0 pid=39") || MatchLine("a.b", "axb") || MatchLine("x", "xy") {
		t.Fatal("MatchLine")
	}
}

// TestRunReportsDifferences: a transcript whose output differs fails.
func TestRunReportsDifferences(t *testing.T) {
	tr := Transcript{Line: 1, Steps: []Step{{Cmd: "echo hi", Want: []string{"hi"}}, {Cmd: "echo no", Want: []string{"yes"}}}}
	ft := &fakeT{TB: t}
	Run(ft, tr, t.TempDir(), nil, 10*time.Second)
	if ft.errors != 1 {
		t.Fatalf("%d differences reported, want 1", ft.errors)
	}
}

type fakeT struct {
	testing.TB
	errors int
}

func (f *fakeT) Errorf(string, ...any) { f.errors++ }
func (f *fakeT) Helper()               {}
