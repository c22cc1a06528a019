package lab

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// CacheDir is ${SANDFS_CACHE:-/var/cache/sandfs}.
func CacheDir() string {
	if d := os.Getenv("SANDFS_CACHE"); d != "" {
		return d
	}
	return "/var/cache/sandfs"
}

// FindRepo finds the sandfs checkout: $SANDFS_REPO, else the parent of the
// directory holding the running executable (bin/sandfs), else the nearest
// ancestor of the working directory whose go.mod declares module sandfs.
func FindRepo() (string, error) {
	isRepo := func(d string) bool {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		return err == nil && bytes.HasPrefix(b, []byte("module sandfs\n"))
	}
	if d := os.Getenv("SANDFS_REPO"); d != "" {
		if !isRepo(d) {
			return "", fmt.Errorf("lab: SANDFS_REPO is not a sandfs checkout %q", d)
		}
		return filepath.Abs(d)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if d := filepath.Dir(filepath.Dir(exe)); isRepo(d) {
				return d, nil
			}
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("lab: getwd: %v", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isRepo(d) {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("lab: no sandfs checkout above %q (set SANDFS_REPO)", wd)
		}
	}
}

// ServeTokenPath is the repo-relative file holding the 9P TCP token that
// `sandfs lab serve` gives the daemon inside the lab (it reads it through
// the read-only share) and that the host's `sandfs mount --token-file` uses.
const ServeTokenPath = "build/lab/token"

// ServeToken returns the host path of the lab serve token, creating it
// (32 hex digits, mode 0600) if missing.
func ServeToken(repo string) (string, error) {
	p := filepath.Join(repo, ServeTokenPath)
	if b, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("lab: token dir: %v", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("lab: token: %v", err)
	}
	if err := os.WriteFile(p, []byte(hex.EncodeToString(raw[:])+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("lab: write token %q: %v", p, err)
	}
	return p, nil
}
