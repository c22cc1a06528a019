package main

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	for _, c := range []struct {
		args      []string
		stopAfter int
		want      []string
		cwd       string
	}{
		{[]string{"t", "--", "sh", "-c", "exit 3"}, 1, []string{"t", "sh", "-c", "exit 3"}, ""},
		{[]string{"--cwd", "/x", "t", "ls", "-l"}, 1, []string{"t", "ls", "-l"}, "/x"},
		{[]string{"t", "--cwd", "/y", "--", "ls"}, 1, []string{"t", "ls"}, "/y"},
		{[]string{"a", "--cwd", "/z", "b"}, 0, []string{"a", "b"}, "/z"},
		{[]string{"--", "-a", "b"}, 0, []string{"-a", "b"}, ""},
	} {
		fl := flag.NewFlagSet("x", flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		cwd := fl.String("cwd", "", "")
		got, err := parseInterspersed(fl, c.args, c.stopAfter)
		if err != nil || !slices.Equal(got, c.want) || *cwd != c.cwd {
			t.Errorf("parseInterspersed(%q, %d) = %q, cwd %q, %v; want %q, cwd %q", c.args, c.stopAfter, got, *cwd, err, c.want, c.cwd)
		}
	}
}
