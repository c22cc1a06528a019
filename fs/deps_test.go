package fs_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoControlPlane keeps the node model and its 9P code free of the
// control plane: the guest agent serves its tree with them. Of sandfs's
// packages, sandfs/fs and sandfs/fs/ninep may depend (directly or not)
// only on these.
func TestNoControlPlane(t *testing.T) {
	allowed := []string{"sandfs/fs", "sandfs/fs/ninep", "sandfs/ctl/cred", "sandfs/ctl/msg"}
	for _, root := range []string{"sandfs/fs", "sandfs/fs/ninep"} {
		seen := map[string]bool{}
		todo := []string{root}
		for len(todo) > 0 {
			pkg := todo[0]
			todo = todo[1:]
			if seen[pkg] {
				continue
			}
			seen[pkg] = true
			if !slices.Contains(allowed, pkg) {
				t.Errorf("%s depends on %s", root, pkg)
				continue
			}
			todo = append(todo, sandfsImports(t, pkg)...)
		}
	}
}

// sandfsImports returns the sandfs packages that package pkg's non-test
// files import.
func sandfsImports(t *testing.T, pkg string) []string {
	dir := filepath.Join("..", strings.TrimPrefix(pkg, "sandfs"))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); p == "sandfs" || strings.HasPrefix(p, "sandfs/") {
				out = append(out, p)
			}
		}
	}
	return out
}
