package ctl

// The template snapshot cache of VMMRuntime: one entry per template
// image, kernel and shape, holding a full snapshot of the template booted
// until its agent served plus the frozen disk layer that matches it.
// Entries are written atomically (built in a temporary directory, then
// renamed: complete or absent) and built once however many `new`s ask
// at the same time.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Names inside a cache entry; its snapshot directory (meta, mem) is
// tmplSnapID(key).
const (
	entryLayer   = "rootfs.cow" // the frozen disk layer (and its .map)
	entryConsole = "console"    // the template's boot log
)

// tmplKey names the cache entry of a template image, kernel and shape:
// "<template>-<mem MiB>m<cpus>c-<hash>", the hash over the identity
// (device, inode, size, modification time) of the image and the kernel,
// the shape and the command line, so a rebuilt image or kernel gets a
// new entry.
func tmplKey(tmpl, image, kernel string, mem uint64, cpus int, cmdline string) (string, error) {
	h := sha256.New()
	for _, p := range []string{image, kernel} {
		if err := fileIdentity(h, p); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(h, "mem=%d cpus=%d cmdline=%q\n", mem, cpus, cmdline)
	// The layout: 2, the snapshot is _<key>/, not snap/; 3, every
	// machine has the virtio-9p device (a guest booted without it never
	// probes it after a restore); 4, virtio-net offers transmit offloads
	// (a guest negotiates features at boot only). Bump it whenever the
	// devices every machine gets change, so templates are booted again
	// with them.
	fmt.Fprintf(h, "layout=4\n")
	return fmt.Sprintf("%s-%dm%dc-%s", tmpl, mem>>20, cpus, hex.EncodeToString(h.Sum(nil)[:8])), nil
}

// fileIdentity writes the identity of file p (path, device, inode, size,
// modification time) to h: it changes when the file is rebuilt.
func fileIdentity(h io.Writer, p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	_, err = fmt.Fprintf(h, "%s dev=%d ino=%d size=%d mtime=%d\n", p, st.Dev, st.Ino, fi.Size(), fi.ModTime().UnixNano())
	return err
}

// imageID is a short hash of image's identity (fileIdentity): a snapshot
// records the one of the disk image its layer is over.
func imageID(image string) (string, error) {
	h := sha256.New()
	if err := fileIdentity(h, image); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// tmplSnapID is the id of entry key's snapshot, and the name of its
// directory: "_<key>", which no sandbox snapshot can have (ValidName),
// since a sandbox's snapshots are deltas over it in the same stores
// (vmmsnap.go).
func tmplSnapID(key string) string { return "_" + key }

// tmplCache is the set of entries under dir, and the builds under way.
type tmplCache struct {
	dir string

	mu       sync.Mutex
	building map[string]*tmplFlight
}

// tmplFlight is one build; waiters read err and abandon after done is
// closed.
type tmplFlight struct {
	done    chan struct{}
	err     error
	waiters int  // gets waiting for it (tests)
	abandon bool // it failed because its builder's ctx ended
}

// get returns the directory of entry key, building it with build when
// absent (built reports so). build fills the directory it is given
// (empty, on the cache's file system); get renames it into place only
// when build succeeded, and removes it otherwise. Concurrent gets of
// one key run one build, under the context of the get that started it;
// the others wait for it (or for ctx) and share its outcome, except
// when that get's ctx ended (its sandbox was killed while creating):
// then a waiter builds again under its own.
func (c *tmplCache) get(ctx context.Context, key string, build func(ctx context.Context, dir string) error) (dir string, built bool, err error) {
	final := filepath.Join(c.dir, key)
	for {
		c.mu.Lock()
		if _, err := os.Stat(final); err == nil {
			c.mu.Unlock()
			return final, false, nil
		}
		f, wait := c.building[key]
		if wait {
			f.waiters++
		} else {
			if c.building == nil {
				c.building = map[string]*tmplFlight{}
			}
			f = &tmplFlight{done: make(chan struct{})}
			c.building[key] = f
		}
		c.mu.Unlock()
		if !wait {
			f.err = c.write(ctx, final, build)
			f.abandon = f.err != nil && ctx.Err() != nil
			c.mu.Lock()
			delete(c.building, key)
			c.mu.Unlock()
			close(f.done)
			return final, f.err == nil, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return "", false, ctx.Err()
		}
		if f.err == nil {
			return final, false, nil
		}
		if !f.abandon || ctx.Err() != nil {
			return "", false, f.err
		}
	}
}

// write builds final atomically: into a fresh temporary directory next
// to it (".b-<end of key>-*"), synced, then renamed. Leftovers of a
// build of the same key interrupted by a crash are removed first.
func (c *tmplCache) write(ctx context.Context, final string, build func(ctx context.Context, dir string) error) error {
	if err := os.MkdirAll(c.dir, 0o711); err != nil {
		return Errorf(syscall.EIO, "template cache: %v", err)
	}
	// Short: the builder's run directory, and its vsock socket (at most
	// 96 bytes of path), are inside it.
	key := filepath.Base(final)
	prefix := ".b-" + key[max(0, len(key)-8):] + "-"
	old, _ := filepath.Glob(filepath.Join(c.dir, prefix+"*"))
	for _, o := range old {
		os.RemoveAll(o)
	}
	tmp, err := os.MkdirTemp(c.dir, prefix)
	if err != nil {
		return Errorf(syscall.EIO, "template cache: %v", err)
	}
	err = build(ctx, tmp)
	if err == nil {
		err = syncTree(tmp)
	}
	if err == nil {
		// final is absent: get saw it so, and no other build of it runs
		// (one per key here; one daemon per state, its flock).
		if err = os.Rename(tmp, final); err == nil {
			err = syncDir(c.dir)
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		if _, ok := err.(*Error); !ok {
			err = Errorf(Errno(err), "template cache: %v", err)
		}
	}
	return err
}

// syncTree fsyncs every regular file and directory under dir (a named
// pipe, device or socket there, as a world's upper in a snapshot may
// hold, is not opened: an open of a pipe would wait for a writer).
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		return syncDir(p)
	})
}
