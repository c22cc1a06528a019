package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodToken = "0123456789abcdef0123456789abcdef"

// TestClientToken: where the client commands and `sandfs mount` take the
// attach token from. --token is refused (argv is readable by every local
// user, ps); a unix socket never gets one.
func TestClientToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, env string
		args      []string
		want      string
		err       error
	}{
		{"argv refused", "", []string{"--addr", "tcp:h:1", "--token", goodToken}, "", errArgvToken},
		{"argv refused with a file", "", []string{"--addr", "tcp:h:1", "--token-file", file, "--token", goodToken}, "", errArgvToken},
		{"argv refused on unix", "", []string{"--addr", "unix:/s", "--token", goodToken}, "", errArgvToken},
		{"env", "from-env", []string{"--addr", "tcp:h:1"}, "from-env", nil},
		{"file over env", "from-env", []string{"--addr", "tcp:h:1", "--token-file", file}, "from-file", nil},
		{"unix ignores env", "from-env", []string{"--addr", "unix:/s"}, "", nil},
		{"unix ignores file", "", []string{"--addr", "unix:/s", "--token-file", file}, "", nil},
		{"none", "", []string{"--addr", "tcp:h:1"}, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SANDFS_TOKEN", c.env)
			fl := flag.NewFlagSet("x", flag.ContinueOnError)
			fl.SetOutput(io.Discard)
			var cf clientFlags
			cf.register(fl)
			if err := fl.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			got, err := cf.token()
			if got != c.want || !errors.Is(err, c.err) {
				t.Errorf("token() with %q, $SANDFS_TOKEN=%q = %q, %v; want %q, %v", c.args, c.env, got, err, c.want, c.err)
			}
		})
	}
}

// TestServeToken: the daemon's token comes from --token-file, else
// $SANDFS_TOKEN (then unset), else STATE/token (generated); short tokens
// are refused.
func TestServeToken(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, short := write("good", goodToken+"\n"), write("short", "s3cret\n")

	t.Setenv("SANDFS_TOKEN", "")
	if tok, err := loadToken(log, dir, good); tok != goodToken || err != nil {
		t.Errorf("--token-file: %q, %v; want %q", tok, err, goodToken)
	}
	if _, err := loadToken(log, dir, short); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("short --token-file: %v; want too short", err)
	}
	gen, err := loadToken(log, dir, "")
	if len(gen) != 32 || err != nil {
		t.Errorf("generated: %q, %v; want 32 hex digits", gen, err)
	}

	t.Setenv("SANDFS_TOKEN", "fedcba9876543210fedcba9876543210")
	if tok, err := loadToken(log, dir, good); tok != goodToken || err != nil {
		t.Errorf("--token-file over $SANDFS_TOKEN: %q, %v; want %q", tok, err, goodToken)
	}
	if tok, err := loadToken(log, dir, ""); tok != "fedcba9876543210fedcba9876543210" || err != nil {
		t.Errorf("$SANDFS_TOKEN: %q, %v", tok, err)
	}
	if v, ok := os.LookupEnv("SANDFS_TOKEN"); ok {
		t.Errorf("$SANDFS_TOKEN still set (%q) after it was read; children would inherit it", v)
	}
	t.Setenv("SANDFS_TOKEN", "short")
	if _, err := loadToken(log, dir, ""); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("short $SANDFS_TOKEN: %v; want too short", err)
	}
}
