package world

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestApplyKilled: a process killed (SIGKILL) during Apply, right after
// a file reached the lower and before its upper entry went, leaves each
// lower file either unchanged or fully applied, and a re-run completes
// the apply without reporting a conflict.
func TestApplyKilled(t *testing.T) {
	if dir := os.Getenv("SANDFS_WORLD_APPLY_CHILD"); dir != "" {
		applyChild(dir)
		return
	}
	const n, size = 8, 256 << 10
	lower, dir := t.TempDir(), t.TempDir()
	content := func(i int, c byte) []byte { return bytes.Repeat([]byte{c + byte(i)}, size) }
	for i := range n {
		must(t, os.WriteFile(filepath.Join(lower, fmt.Sprint("f", i)), content(i, 'a'), 0o644))
	}
	w, err := Open(lower, dir, Overlay)
	must(t, err)
	tg := nodes(t, w)
	for i := range n {
		must(t, tg.write(fmt.Sprint("f", i), string(content(i, 'A'))))
	}
	w.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestApplyKilled$")
	cmd.Env = append(os.Environ(), "SANDFS_WORLD_APPLY_CHILD="+dir, "SANDFS_WORLD_APPLY_LOWER="+lower)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	sc := bufio.NewScanner(out)
	applied := 0
	for applied < 3 && sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("applied ")) {
			applied++
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if applied != 3 {
		t.Fatalf("the child applied %d files before the kill, want 3", applied)
	}

	done := 0
	for i := range n {
		b, err := os.ReadFile(filepath.Join(lower, fmt.Sprint("f", i)))
		switch {
		case err != nil:
			t.Errorf("f%d: %v", i, err)
		case bytes.Equal(b, content(i, 'A')):
			done++
		case !bytes.Equal(b, content(i, 'a')):
			t.Errorf("f%d is neither old nor new (%d bytes)", i, len(b))
		}
	}
	if done != 3 {
		t.Errorf("%d files applied at the kill, want 3", done)
	}
	w, err = Open(lower, dir, Overlay)
	must(t, err)
	defer w.Close()
	must(t, w.Apply(false))
	for i := range n {
		b, _ := os.ReadFile(filepath.Join(lower, fmt.Sprint("f", i)))
		if !bytes.Equal(b, content(i, 'A')) {
			t.Errorf("f%d not applied after the re-run", i)
		}
	}
	if ents, _ := os.ReadDir(w.Upper()); len(ents) != 0 {
		t.Errorf("upper after the re-run: %v", ents)
	}
}

// applyChild applies the world in dir, telling each file that reached
// the lower and stopping (to be killed) at the third.
func applyChild(dir string) {
	w, err := Open(os.Getenv("SANDFS_WORLD_APPLY_LOWER"), dir, Overlay)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	k := 0
	w.applyHook = func(p string) {
		fmt.Println("applied", p)
		if k++; k == 3 {
			select {} // killed here: f's lower copy is in place, its upper entry still there
		}
	}
	err = w.Apply(false)
	fmt.Println("error", err)
	os.Exit(1)
}

// TestRestoreKilled: a process killed during Restore, after the saved
// upper was exchanged in and before its origins replaced the world's,
// leaves a world whose next Open installs the saved origins: apply then
// sees that the lower changed since the saved copy-up (a conflict), as
// it would have without the kill, instead of judging the saved upper by
// the origins of the changes it replaced.
func TestRestoreKilled(t *testing.T) {
	if dir := os.Getenv("SANDFS_WORLD_RESTORE_CHILD"); dir != "" {
		restoreChild(dir)
		return
	}
	lower, dir, saved := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "saved")
	f := filepath.Join(lower, "f")
	must(t, os.WriteFile(f, []byte("one"), 0o644))
	w, err := Open(lower, dir, Overlay)
	must(t, err)
	must(t, nodes(t, w).write("f", "world")) // copied up over "one"
	_, err = w.Save(saved)
	must(t, err)
	must(t, w.Discard())
	must(t, os.WriteFile(f, []byte("two!"), 0o644)) // the lower moves on
	must(t, nodes(t, w).write("f", "again"))        // copied up over "two!"
	w.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreKilled$")
	cmd.Env = append(os.Environ(), "SANDFS_WORLD_RESTORE_CHILD="+dir, "SANDFS_WORLD_RESTORE_LOWER="+lower, "SANDFS_WORLD_RESTORE_SAVED="+saved)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	sc := bufio.NewScanner(out)
	exchanged := false
	for !exchanged && sc.Scan() {
		exchanged = sc.Text() == "exchanged"
		if !exchanged {
			t.Logf("child: %s", sc.Text())
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !exchanged {
		t.Fatal("the child's Restore never reached the exchange")
	}

	w, err = Open(lower, dir, Overlay)
	must(t, err)
	defer w.Close()
	wantDisk(t, filepath.Join(w.Upper(), "f"), "world")
	var ce *ConflictError
	if err := w.Apply(false); !errors.As(err, &ce) || len(ce.Paths) != 1 || ce.Paths[0] != "f" {
		t.Errorf("apply after the killed restore = %v; want a conflict on f (the lower changed since the saved copy-up)", err)
	}
	wantDisk(t, f, "two!")
	if js, _ := filepath.Glob(filepath.Join(dir, "origins.restore-*")); len(js) != 0 {
		t.Errorf("journals left after Open: %v", js)
	}
}

// restoreChild restores the world in dir from its saved copy and stops
// (to be killed) once the saved upper is in place.
func restoreChild(dir string) {
	w, err := Open(os.Getenv("SANDFS_WORLD_RESTORE_LOWER"), dir, Overlay)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	w.restoreHook = func() {
		fmt.Println("exchanged")
		select {} // killed here: the saved upper in place, the old origins still the world's
	}
	err = w.Restore(os.Getenv("SANDFS_WORLD_RESTORE_SAVED"))
	fmt.Println("error", err)
	os.Exit(1)
}
