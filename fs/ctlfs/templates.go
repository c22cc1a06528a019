package ctlfs

import (
	"bytes"
	"context"
	"fmt"
	iofs "io/fs"
	"syscall"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// templatesDir serves /templates/: one directory per template the
// runtime knows (ctl.TemplateLister), by name; empty without one.
type templatesDir struct {
	plane *ctl.Plane
	mode  iofs.FileMode
}

var _ sfs.Dir = (*templatesDir)(nil)

// Stat implements fs.Node.Stat.
func (d *templatesDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | d.mode.Perm()}, nil
}

// Lookup implements fs.Dir.Lookup.
func (d *templatesDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	if _, err := d.plane.Template(name); err != nil {
		return nil, err
	}
	return templateTable.Dir(tmplNode{d.plane, name}, 0o555, nil), nil
}

// List implements fs.Dir.List.
func (d *templatesDir) List(context.Context) ([]sfs.Dirent, error) {
	ts, err := d.plane.Templates()
	if err != nil {
		return nil, err
	}
	out := make([]sfs.Dirent, len(ts))
	for i, t := range ts {
		out[i] = sfs.Dirent{Name: t.Name, Mode: iofs.ModeDir}
	}
	return out, nil
}

// tmplNode is the value a template's directory serves: its name (the
// template is read again at each generation: its cache changes).
type tmplNode struct {
	p    *ctl.Plane
	name string
}

// templateTable is a template's directory, /templates/<t>/.
var templateTable = sfs.Table[tmplNode]{
	{Name: "info", Mode: 0o444, New: tmplInfoFile},
	{Name: "shapes", Mode: 0o444, New: tmplShapesFile},
	{Name: "log", Mode: 0o444, New: tmplLogFile},
	{Name: "policy", Mode: 0o444, New: tmplPolicyFile},
}

// tmplPolicyFile serves <t>/policy: the egress policy a sandbox of the
// template gets when its new gives no net= (ctl.Plane.TemplatePolicy:
// the template's own, else default deny), in canonical text; a read
// fails with the policy file's error when it is bad.
func tmplPolicyFile(n tmplNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		if _, err := n.p.Template(n.name); err != nil {
			return err
		}
		text, err := n.p.TemplatePolicy(n.name)
		if err != nil {
			return err
		}
		b.WriteString(text)
		return nil
	}}
}

// tmplInfoFile serves <t>/info, one line in fixed field order (new
// fields only at the end), e.g.
//
//	base image=268435456 shapes=2
func tmplInfoFile(n tmplNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		t, err := n.p.Template(n.name)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s image=%d shapes=%d\n", t.Name, t.ImageBytes, len(t.Shapes))
		return nil
	}}
}

// tmplShapesFile serves <t>/shapes: one line per cached snapshot of the
// template (ctl.TemplateShape.Line), by mem, cpus, then build time, e.g.
//
//	base-256m1c-0123456789abcdef mem=256M cpus=1 data=47185920 disk=581632 built=1764423000 current=yes
func tmplShapesFile(n tmplNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		t, err := n.p.Template(n.name)
		if err != nil {
			return err
		}
		for _, s := range t.Shapes {
			b.WriteString(s.Line())
			b.WriteByte('\n')
		}
		return nil
	}}
}

// maxTmplLog bounds <t>/log: the end of the build log is served.
const maxTmplLog = 256 << 10

// tmplLogFile serves <t>/log: the build log (the console of the cold
// boot) of the template's newest current shape, its last maxTmplLog
// bytes; empty when no shape is built.
func tmplLogFile(n tmplNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		t, err := n.p.Template(n.name)
		if err != nil {
			return err
		}
		var last *ctl.TemplateShape
		for i, s := range t.Shapes {
			if s.Current && (last == nil || s.Built.After(last.Built)) {
				last = &t.Shapes[i]
			}
		}
		if last == nil {
			return nil
		}
		log, err := ctl.ReadTail(last.Log, maxTmplLog)
		if err != nil {
			return ctl.Errorf(syscall.EIO, "template log: %v", err)
		}
		b.Write(log)
		return nil
	}}
}
