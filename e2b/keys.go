package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"sandfs/ctl/cred"
	"sandfs/fs/client"
	"sandfs/fs/ninep"
)

// minKey is the shortest API key accepted.
const minKey = 16

// LoadKeys returns the API keys and who each acts as in the tree. From
// file, if given: one key a line, then its owner UID[:GID] (required,
// so that no key acts as root unless its line says 0; GID defaults to
// 0), '#' comments. Else $SANDFS_E2B_KEY (then removed from the
// environment, so that no child inherits it). Else the key in genFile,
// generated (32 hex digits, mode 0600) when missing: generated is then
// that key, for the caller to print. The last two are the operator's
// single key and act as root (the daemon's own identity), as the
// daemon's unix socket does.
func LoadKeys(file, genFile string) (keys map[string]cred.Cred, generated string, err error) {
	keys = map[string]cred.Cred{}
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fmt.Errorf("e2b keys: %w", err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			who, err := parseWho(f[1:])
			if err != nil || len(f[0]) < minKey {
				return nil, "", fmt.Errorf("e2b keys: %s:%d: want KEY (%d+ bytes) UID[:GID] (0 for root)", file, i+1, minKey)
			}
			keys[f[0]] = who
		}
		if len(keys) == 0 {
			return nil, "", fmt.Errorf("e2b keys: %s holds no key", file)
		}
		return keys, "", nil
	case os.Getenv("SANDFS_E2B_KEY") != "":
		k := strings.TrimSpace(os.Getenv("SANDFS_E2B_KEY"))
		os.Unsetenv("SANDFS_E2B_KEY")
		if len(k) < minKey {
			return nil, "", fmt.Errorf("e2b keys: $SANDFS_E2B_KEY too short (want %d+ bytes)", minKey)
		}
		keys[k] = cred.Cred{}
		return keys, "", nil
	}
	b, err := os.ReadFile(genFile)
	if errors.Is(err, fs.ErrNotExist) {
		r := make([]byte, 16)
		rand.Read(r)
		b = []byte("e2b_" + hex.EncodeToString(r) + "\n")
		if err := os.WriteFile(genFile, b, 0o600); err != nil {
			return nil, "", fmt.Errorf("e2b keys: %w", err)
		}
	} else if err != nil {
		return nil, "", fmt.Errorf("e2b keys: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if len(k) < minKey {
		return nil, "", fmt.Errorf("e2b keys: %s: key too short", genFile)
	}
	keys[k] = cred.Cred{}
	return keys, k, nil
}

// parseWho reads the owner field, UID[:GID].
func parseWho(f []string) (cred.Cred, error) {
	if len(f) != 1 {
		return cred.Cred{}, errors.New("want one owner field UID[:GID]")
	}
	u, g, hasG := strings.Cut(f[0], ":")
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return cred.Cred{}, err
	}
	gid := uint64(0)
	if hasG {
		if gid, err = strconv.ParseUint(g, 10, 32); err != nil {
			return cred.Cred{}, err
		}
	}
	return cred.Cred{UID: uint32(uid), GID: uint32(gid)}, nil
}

// PipeDialer reaches srv in process: each dial is a net.Pipe whose
// other end srv serves as who until ctx ends, the same 9P conversation
// a client on the daemon's socket has.
func PipeDialer(ctx context.Context, srv *ninep.Server) Dialer {
	return func(_ context.Context, who cred.Cred) (*client.Client, error) {
		a, b := net.Pipe()
		go srv.ServeConnAs(ctx, a, who)
		return client.NewConn(b, "")
	}
}
