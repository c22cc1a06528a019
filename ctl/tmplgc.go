package ctl

// The template snapshot cache as a list (TemplateLister) and its garbage
// collection: an entry whose key is no longer the one a new sandbox of
// its shape would use (its image or the kernel rebuilt, the command line
// changed, the image gone) is removed. Sandboxes restored from it keep
// what they need (hard links of its snapshot in their stores, their own
// copies of its layer, and the registry's `_<key>` for their deltas).

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/snapshot"
)

var _ TemplateLister = (*VMMRuntime)(nil)

// keyPattern matches tmplKey's names: template, mem MiB, cpus, hash.
var keyPattern = regexp.MustCompile(`^([a-z0-9][a-z0-9-]{0,62})-([0-9]{1,7})m([0-9]{1,3})c-([0-9a-f]{16})$`)

// parseKey splits an entry's name made by tmplKey.
func parseKey(key string) (tmpl string, mem uint64, cpus int, ok bool) {
	m := keyPattern.FindStringSubmatch(key)
	if m == nil {
		return "", 0, 0, false
	}
	mib, err1 := strconv.ParseUint(m[2], 10, 64)
	c, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return m[1], mib << 20, c, true
}

// currentKey is the key a new sandbox of template tmpl and this shape
// uses now (startFromTemplate; the one derivation, so that gc never
// takes a current entry for a stale one): its image (config's rootfs),
// the kernel, the shape and the guest's command line.
func (r *VMMRuntime) currentKey(tmpl string, mem uint64, cpus int) (string, error) {
	return tmplKey(tmpl, filepath.Join(r.TemplatesDir, tmpl+".ext4"), r.KernelPath, mem, cpus, r.guestCmdline())
}

// cacheEntries returns the names of the cache's complete entries (not
// the builds under way, `.b-*`, nor removals, `.rm-*`) that parse.
func (r *VMMRuntime) cacheEntries() []string {
	if r.CacheDir == "" {
		return nil
	}
	ents, err := os.ReadDir(r.CacheDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if _, _, _, ok := parseKey(e.Name()); ok && e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// Templates implements TemplateLister: the images in TemplatesDir
// (<name>.ext4) and each one's cache entries.
func (r *VMMRuntime) Templates() ([]TemplateInfo, error) {
	imgs, err := filepath.Glob(filepath.Join(r.TemplatesDir, "*.ext4"))
	if err != nil {
		return nil, err
	}
	byName := map[string]*TemplateInfo{}
	var out []*TemplateInfo
	for _, img := range imgs {
		name := strings.TrimSuffix(filepath.Base(img), ".ext4")
		fi, err := os.Stat(img)
		if !ValidName(name) || err != nil || !fi.Mode().IsRegular() {
			continue
		}
		t := &TemplateInfo{Name: name, ImageBytes: fi.Size()}
		byName[name] = t
		out = append(out, t)
	}
	for _, key := range r.cacheEntries() {
		tmpl, mem, cpus, _ := parseKey(key)
		t := byName[tmpl]
		if t == nil {
			continue // its image is gone: collected at the next gc
		}
		entry := filepath.Join(r.CacheDir, key)
		fi, err := os.Stat(entry)
		if err != nil {
			continue
		}
		cur, _ := r.currentKey(tmpl, mem, cpus)
		t.Shapes = append(t.Shapes, TemplateShape{Key: key, MemBytes: mem, CPUs: cpus, Built: fi.ModTime(), Current: cur == key,
			DataBytes: allocated(filepath.Join(entry, tmplSnapID(key), snapshot.MemFile)),
			DiskBytes: allocated(filepath.Join(entry, entryLayer)), Log: filepath.Join(entry, entryConsole)})
	}
	res := make([]TemplateInfo, len(out))
	for i, t := range out {
		slices.SortFunc(t.Shapes, func(a, b TemplateShape) int {
			switch {
			case a.MemBytes != b.MemBytes:
				return cmpU(a.MemBytes, b.MemBytes)
			case a.CPUs != b.CPUs:
				return a.CPUs - b.CPUs
			}
			return a.Built.Compare(b.Built)
		})
		res[i] = *t
	}
	return res, nil
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// allocated is the bytes a file takes on disk, 0 if it cannot be read.
func allocated(p string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(p, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// gcTemplates removes the cache entries that no new sandbox will use (a
// key that is not its shape's current one, or of an image that is gone):
// renamed to `.rm-<key>` (gone from the cache at once), then removed.
// It returns the keys removed; failures are logged.
func (r *VMMRuntime) gcTemplates() []string {
	var gone []string
	if r.CacheDir == "" {
		return nil
	}
	// Removals a crash cut short.
	left, _ := filepath.Glob(filepath.Join(r.CacheDir, ".rm-*"))
	for _, l := range left {
		os.RemoveAll(l)
	}
	for _, key := range r.cacheEntries() {
		tmpl, mem, cpus, _ := parseKey(key)
		cur, err := r.currentKey(tmpl, mem, cpus)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			r.Log.Warn("template cache: entry kept: its current key is unknown", "entry", key, "err", err)
			continue
		}
		if err == nil && cur == key {
			continue
		}
		c := r.templateCache()
		c.mu.Lock()
		if c.building[key] != nil {
			c.mu.Unlock()
			continue
		}
		dead := filepath.Join(r.CacheDir, ".rm-"+key+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		err = os.Rename(filepath.Join(r.CacheDir, key), dead)
		c.mu.Unlock()
		if err == nil {
			err = os.RemoveAll(dead)
		}
		if err != nil {
			r.Log.Warn("template cache: cannot remove a stale entry", "entry", key, "err", err)
			continue
		}
		r.Log.Info("template cache: stale entry removed (image or kernel rebuilt, or image gone)", "entry", key)
		gone = append(gone, key)
	}
	return gone
}
