package e2b

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Record is what the adapter keeps of a sandbox that the tree has no
// place for: E2B's own notions.
type Record struct {
	ID       string            `json:"id"`
	Owner    string            `json:"owner"` // keyID of the API key that made it
	Template string            `json:"template"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Envs     map[string]string `json:"envs,omitempty"`
	Token    string            `json:"token"` // envd access token (X-Access-Token)
	Started  time.Time         `json:"started"`
}

// Registry is the adapter's records, saved whole to one JSON file (mode
// 0600: it holds the access tokens) at every change: its sandboxes and
// which API key owns each snapshot taken through it. The tree's
// snapshots are global (any of its owner's, or root's, connections may
// name one); the adapter shows a key only the snapshots it took.
type Registry struct {
	path  string     // "" for memory only
	mu    sync.Mutex // guards recs and snaps
	recs  map[string]*Record
	snaps map[string]string // snapshot name → keyID of its owner
}

// saved is the registry file: {"sandboxes": [...], "snapshots": {name: owner}}.
// A file written before snapshots had owners is a bare list of records.
type saved struct {
	Sandboxes []*Record         `json:"sandboxes"`
	Snapshots map[string]string `json:"snapshots,omitempty"`
}

// NewRegistry makes an empty registry saved at path ("" for none).
func NewRegistry(path string) *Registry {
	return &Registry{path: path, recs: map[string]*Record{}, snaps: map[string]string{}}
}

// LoadRegistry reads the registry saved at path (empty if there is no
// file yet).
func LoadRegistry(path string) (*Registry, error) {
	r := NewRegistry(path)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	var sv saved
	if len(b) > 0 && b[0] == '[' {
		err = json.Unmarshal(b, &sv.Sandboxes)
	} else {
		err = json.Unmarshal(b, &sv)
	}
	if err != nil {
		return nil, fmt.Errorf("e2b registry %s: %w", path, err)
	}
	for _, rec := range sv.Sandboxes {
		r.recs[rec.ID] = rec
	}
	for name, owner := range sv.Snapshots {
		r.snaps[name] = owner
	}
	return r, nil
}

// keyID names an API key in records without keeping the key.
func keyID(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:8])
}

// newToken is a fresh envd access token.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Get returns the record of id, nil if none.
func (r *Registry) Get(id string) *Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.recs[id]; rec != nil {
		c := *rec
		return &c
	}
	return nil
}

// Owned returns the records of the API key with keyID owner, oldest
// first.
func (r *Registry) Owned(owner string) []*Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Record
	for _, rec := range r.recs {
		if rec.Owner == owner {
			c := *rec
			out = append(out, &c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// Put adds or replaces rec.
func (r *Registry) Put(rec *Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *rec
	r.recs[rec.ID] = &c
	return r.saveLocked()
}

// Delete removes the record of id.
func (r *Registry) Delete(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.recs[id]; !ok {
		return nil
	}
	delete(r.recs, id)
	return r.saveLocked()
}

// SnapOwner is the keyID of the API key that owns snapshot name, "" if
// none does (taken outside the adapter, or removed).
func (r *Registry) SnapOwner(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snaps[name]
}

// PutSnap records that snapshot name belongs to the key with keyID owner
// (a new snapshot of that name replaces a removed one's record).
func (r *Registry) PutSnap(name, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snaps[name] == owner {
		return nil
	}
	r.snaps[name] = owner
	return r.saveLocked()
}

// DeleteSnap forgets snapshot name.
func (r *Registry) DeleteSnap(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.snaps[name]; !ok {
		return nil
	}
	delete(r.snaps, name)
	return r.saveLocked()
}

// saveLocked writes the registry: a new file renamed over the old.
func (r *Registry) saveLocked() error {
	if r.path == "" {
		return nil
	}
	sv := saved{Sandboxes: make([]*Record, 0, len(r.recs)), Snapshots: r.snaps}
	for _, rec := range r.recs {
		sv.Sandboxes = append(sv.Sandboxes, rec)
	}
	b, err := json.MarshalIndent(sv, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(r.path), "."+filepath.Base(r.path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.path)
}
