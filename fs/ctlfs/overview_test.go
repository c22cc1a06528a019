package ctlfs

import (
	"os"
	"strings"
	"testing"

	sfs "sandfs/fs"
)

// TestOverviewListsEveryFile: the tree's overview at the top of
// docs/filesystem.md and the map in this package's doc comment name
// every file and directory of the tree's tables, so neither falls behind
// the tree.
func TestOverviewListsEveryFile(t *testing.T) {
	var want []string
	want = addPaths(want, "/", rootTable)
	want = addPaths(want, "/sandboxes/<id>/", sandboxTable)
	want = addPaths(want, "/sandboxes/<id>/net/", netTable)
	want = addPaths(want, "/snapshots/<snap>/", snapshotTable)
	want = addPaths(want, "/templates/<t>/", templateTable)
	want = addPaths(want, "/worlds/<w>/", worldTable)

	doc, err := os.ReadFile("../../docs/filesystem.md")
	if err != nil {
		t.Fatal(err)
	}
	overview, _, ok := strings.Cut(string(doc), "\nThe grammar of every message")
	if !ok {
		t.Fatal("docs/filesystem.md: no overview before \"The grammar of every message\"")
	}
	pkg, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if !strings.Contains(overview, "    "+p+" ") {
			t.Errorf("docs/filesystem.md's overview does not list %s", p)
		}
		if !strings.Contains(string(pkg), "//\t"+p+" ") {
			t.Errorf("doc.go's map does not list %s", p)
		}
	}
}

// addPaths appends the paths of table's entries under dir, a directory's
// with its slash.
func addPaths[T any](paths []string, dir string, table sfs.Table[T]) []string {
	for _, e := range table {
		p := dir + e.Name
		if e.Mode.IsDir() {
			p += "/"
		}
		paths = append(paths, p)
	}
	return paths
}
