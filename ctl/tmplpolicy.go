package ctl

// A template's egress policy (VMMRuntime): <TemplatesDir>/<t>.policy
// beside the template's image, in the policy grammar of docs/network.md.
// A sandbox whose new gives no net= starts with it; without the file it
// starts with default deny.

import (
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"

	"sandfs/ctl/msg"
	"sandfs/netpolicy"
)

// TemplatePolicy implements TemplatePolicies: template name's policy
// file, parsed, as canonical text; "" if there is none.
func (r *VMMRuntime) TemplatePolicy(name string) (string, error) {
	if !ValidName(name) {
		return "", Errorf(syscall.EINVAL, "template %s: invalid name", msg.Cite(name))
	}
	path := filepath.Join(r.TemplatesDir, name+".policy")
	// O_NONBLOCK: a FIFO put there must not hang the daemon.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, iofs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", Errorf(Errno(err), "template %s: %v", name, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", Errorf(syscall.EINVAL, "template %s: %s is not a regular file", name, path)
	}
	// Parse refuses text over netpolicy.TextMax: read no more.
	b, err := io.ReadAll(io.LimitReader(f, netpolicy.TextMax+1))
	if err != nil {
		return "", Errorf(syscall.EIO, "template %s: %v", name, err)
	}
	p, err := netpolicy.Parse(b)
	if err != nil {
		return "", Errorf(Errno(err), "template %s: %s: %s", name, path, errText(err))
	}
	return p.String(), nil
}
