package snapshot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the writer that TestKillDuringWrite
// kills.
func TestMain(m *testing.M) {
	if store := os.Getenv("SANDFS_SNAPSHOT_WRITER"); store != "" {
		writer(store)
		return
	}
	os.Exit(m.Run())
}

// writer writes full snapshots of 4 MiB and deltas over them, forever,
// with a line on stdout after each.
func writer(store string) {
	mem := make([]byte, 1024*PageSize)
	all := NewPages(1024)
	all.SetRange(0, 1024)
	var parent *Snapshot
	for i := 0; ; i++ {
		for j := range mem {
			mem[j] = byte(i + j/PageSize)
		}
		var err error
		if parent == nil || i%4 == 0 {
			parent, err = Write(filepath.Join(store, fmt.Sprintf("%s-%d", os.Getenv("SANDFS_SNAPSHOT_RUN"), i)), mem, all, nil, []byte("full"))
		} else {
			parent, err = Write(filepath.Join(store, fmt.Sprintf("%s-%d", os.Getenv("SANDFS_SNAPSHOT_RUN"), i)), mem, all, parent, []byte("delta"))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("written", i)
	}
}

// TestKillDuringWrite kills a writer with SIGKILL at 25 points in time
// after its first snapshot is written (0-168 ms into what follows: a
// fixed time from its start killed a writer slowed by load before it
// wrote anything); every snapshot left visible must open and verify
// (complete), and the rest are only .tmp- directories.
func TestKillDuringWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	store := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for run := range 25 {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "SANDFS_SNAPSHOT_WRITER="+store, fmt.Sprintf("SANDFS_SNAPSHOT_RUN=r%d", run))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() {
			_, err := bufio.NewReader(out).ReadString('\n')
			first <- err
			io.Copy(io.Discard, out)
		}()
		select {
		case err = <-first:
		case <-time.After(2 * time.Minute):
			err = errors.New("no snapshot written in 2 minutes")
		}
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("run %d: writer: %v %s", run, err, stderr.String())
		}
		time.Sleep(time.Duration(run*7) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		if stderr.Len() > 0 {
			t.Fatalf("writer failed: %s", stderr.String())
		}
	}
	ents, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	complete := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpMark) {
			continue
		}
		s, err := Open(filepath.Join(store, e.Name()))
		if err == nil {
			err = Verify(s)
		}
		if err != nil {
			t.Errorf("visible snapshot %s is incomplete: %v", e.Name(), err)
		}
		complete++
	}
	if complete == 0 {
		t.Errorf("no snapshot was completed in 25 runs")
	}
	if err := Clean(store); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d complete snapshots, %d entries before Clean", complete, len(ents))
}
