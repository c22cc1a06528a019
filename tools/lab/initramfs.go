package lab

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sandfs/test/cpio"
)

// initScript is the lab's PID 1 (init.sh): it mounts the repo share, runs
// /run/cmd with /run/env and reports on the virtio-serial ports.
//
//go:embed init.sh
var initScript []byte

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bashStatic is Debian's bash-static: the lab's /bin/bash, so that the
// project's scripts (make run's tools/lab/run.sh) and the docs' transcripts
// run there as on the host.
const bashStatic = "/bin/bash-static"

// initramfs builds the lab initramfs: busybox-static, bash-static, the init
// script, the command and its environment.
func initramfs(busybox string, o *Options) ([]byte, error) {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("lab: read busybox: %v (apt-get install busybox-static)", err)
	}
	bash, err := os.ReadFile(bashStatic)
	if err != nil {
		return nil, fmt.Errorf("lab: read bash: %v (apt-get install bash-static)", err)
	}
	var cmd strings.Builder
	cmd.WriteString("exec")
	for _, a := range o.Args {
		cmd.WriteString(" " + shellQuote(a))
	}
	cmd.WriteString("\n")
	env := []string{
		"HOME=/root",
		"TMPDIR=/tmp",
		"PATH=" + GuestRepo + "/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SANDFS_LAB=1",
		"SANDFS_REPO=" + GuestRepo,
		"SANDFS_KERNEL=" + GuestRepo + "/build/vmlinuz",
		"SANDFS_TEMPLATES=" + GuestRepo + "/build/templates",
		"SANDFS_LAB_DIR=" + o.Dir,
	}
	env = append(env, o.Env...)
	var envf strings.Builder
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\n'\"$;=") {
			return nil, fmt.Errorf("lab: bad environment entry %q", kv)
		}
		envf.WriteString("export " + k + "=" + shellQuote(v) + "\n")
	}
	var buf bytes.Buffer
	c := cpio.NewWriter(&buf)
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys",
		"tmp", "run", "etc", "root", "opt", "opt/sandfs", "mnt", "var"} {
		c.Dir(d, 0o755)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	c.CharDev("dev/null", 0o666, 1, 3)
	c.File("bin/busybox", 0o755, bb)
	c.Symlink("bin/sh", "busybox")
	c.File("bin/bash", 0o755, bash)
	c.File("init", 0o755, initScript)
	c.File("run/cmd", 0o644, []byte(cmd.String()))
	c.File("run/env", 0o644, []byte(envf.String()))
	if err := c.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeInitramfs writes the initramfs for o into dir and returns its path.
func writeInitramfs(dir string, o *Options) (string, error) {
	img, err := initramfs("/bin/busybox", o)
	if err != nil {
		return "", err
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(initrd, img, 0o600); err != nil {
		return "", fmt.Errorf("lab: write initrd: %v", err)
	}
	return initrd, nil
}
