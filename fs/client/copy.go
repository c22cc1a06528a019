package client

import (
	"errors"
	"io"
	"path"
	"strings"
	"syscall"

	"sandfs/ctl/msg"
)

// Remote is a file in a sandbox, "ID:/path".
type Remote struct{ ID, Path string }

// ParseRemote splits "ID:/path"; ok is false for a host path (no colon
// before the first slash).
func ParseRemote(s string) (r Remote, ok bool) {
	id, p, found := strings.Cut(s, ":")
	if !found || id == "" || strings.Contains(id, "/") {
		return Remote{}, false
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return Remote{ID: id, Path: path.Clean(p)}, true
}

func (r Remote) treePath() string { return "sandboxes/" + r.ID + "/fs" + r.Path }

// CopyFrom copies the guest file r into w.
func (c *Client) CopyFrom(r Remote, w io.Writer) (int64, error) {
	f, err := c.Open(r.treePath(), syscall.O_RDONLY)
	if err != nil {
		return 0, c.explain("open "+r.ID+":"+r.Path, err.(*Error).Errno, "sandboxes/"+r.ID+"/err")
	}
	defer f.Close()
	return io.Copy(w, f)
}

// CopyTo copies src into the guest file r, creating it with perm or
// truncating it. If r names a directory, the file goes in it as name.
func (c *Client) CopyTo(src io.Reader, r Remote, name string, perm uint32) (int64, error) {
	errPath := "sandboxes/" + r.ID + "/err"
	p := r.treePath()
	dir, _, err := c.Stat(p)
	if err == nil && dir {
		p = path.Join(p, name)
		dir, _, err = c.Stat(p)
	}
	var f *File
	switch {
	case err == nil && dir:
		return 0, &Error{Op: "copy to " + r.ID + ":" + r.Path, Errno: syscall.EISDIR}
	case err == nil:
		f, err = c.Open(p, syscall.O_WRONLY|syscall.O_TRUNC)
	case errors.Is(err, syscall.ENOENT):
		f, err = c.Create(p, perm)
	}
	if err != nil {
		return 0, c.explain("copy to "+r.ID+":"+r.Path, msg.Errno(err), errPath)
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return n, c.explain("copy to "+r.ID+":"+r.Path, msg.Errno(err), errPath)
	}
	return n, nil
}
