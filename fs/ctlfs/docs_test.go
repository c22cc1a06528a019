package ctlfs_test

import (
	"fmt"
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/test/transcript"
)

// TestDocTranscripts runs every console transcript of docs/filesystem.md
// that needs no guest, verbatim, with bash in a FUSE mount of a fresh tree
// (fake runtime). The lab transcripts run in test/guestlab
// (TestDocLabTranscripts) against a daemon with real guests.
func TestDocTranscripts(t *testing.T) {
	testenv.NeedFUSE(t)
	ts, err := transcript.Parse("../../docs/filesystem.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range ts {
		if tr.Lab {
			continue
		}
		n++
		t.Run(fmt.Sprintf("line%d", tr.Line), func(t *testing.T) {
			e := newEnv(t, "")
			transcript.Run(t, tr, mountFUSE(t, e.tree.Root()).dir, nil, 60*time.Second)
		})
	}
	if n == 0 {
		t.Fatal("no console transcripts in docs/filesystem.md")
	}
}
