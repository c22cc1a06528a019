package ctl

// Templates as the tree shows them (/templates/<t>/): each template
// image, the shapes its snapshot cache holds and the build log, from a
// runtime that implements TemplateLister.

import (
	"fmt"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/netpolicy"
)

// TemplateLister is optionally implemented by a Runtime that knows its
// templates and their snapshot cache (VMMRuntime, tmplgc.go).
type TemplateLister interface {
	// Templates returns every template, by name.
	Templates() ([]TemplateInfo, error)
}

// TemplateInfo is one template: its image and its cached snapshots.
type TemplateInfo struct {
	Name       string
	ImageBytes int64           // the image's size
	Shapes     []TemplateShape // the cache's entries, by mem, cpus, then build time
}

// TemplateShape is one entry of the template snapshot cache: the
// template booted once for a shape and snapshotted.
type TemplateShape struct {
	Key       string // the entry's name: <template>-<mem MiB>m<cpus>c-<hash>
	MemBytes  uint64
	CPUs      int
	DataBytes int64     // the snapshot's memory, allocated bytes
	DiskBytes int64     // its frozen disk layer, allocated bytes
	Built     time.Time // when the entry was made
	// Current: the entry is the one a new sandbox of this shape uses
	// (built from the image and kernel as they are now). Entries of a
	// rebuilt image or kernel are removed (tmplgc.go); one may show
	// between the rebuild and the next build or daemon start.
	Current bool
	// Log is the path of the build's log: the console of its cold boot.
	Log string
}

// Line is the shape's line in /templates/<t>/shapes, fields in this
// fixed order (new ones only at the end), e.g.
//
//	base-256m1c-0123456789abcdef mem=256M cpus=1 data=47185920 disk=581632 built=1764423000 current=yes
func (s TemplateShape) Line() string {
	cur := "no"
	if s.Current {
		cur = "yes"
	}
	return fmt.Sprintf("%s mem=%s cpus=%d data=%d disk=%d built=%d current=%s",
		s.Key, FormatSize(s.MemBytes), s.CPUs, s.DataBytes, s.DiskBytes, s.Built.Unix(), cur)
}

// Templates returns the runtime's templates; none without a runtime
// that lists them.
func (p *Plane) Templates() ([]TemplateInfo, error) {
	tl, ok := p.rt.(TemplateLister)
	if !ok || p.rt == nil {
		return nil, nil
	}
	ts, err := tl.Templates()
	if err != nil {
		return nil, Errorf(syscall.EIO, "templates: %v", err)
	}
	return ts, nil
}

// Template returns template name, or an ENOENT *Error.
func (p *Plane) Template(name string) (TemplateInfo, error) {
	ts, err := p.Templates()
	if err != nil {
		return TemplateInfo{}, err
	}
	for _, t := range ts {
		if t.Name == name {
			return t, nil
		}
	}
	return TemplateInfo{}, Errorf(syscall.ENOENT, "lookup: no template %s", msg.Cite(name))
}

// TemplatePolicies is optionally implemented by a Runtime whose
// templates may carry an egress policy (VMMRuntime: tmplpolicy.go).
type TemplatePolicies interface {
	// TemplatePolicy returns template name's policy as canonical text
	// (netpolicy.Policy.String), "" if it carries none, or an error
	// that names the template and what is wrong with its policy.
	TemplatePolicy(name string) (string, error)
}

// TemplatePolicy is the egress policy a sandbox of template name gets
// when its new gives no net=: the template's own, else default deny;
// canonical text.
func (p *Plane) TemplatePolicy(name string) (string, error) {
	text, err := p.templatePolicy("policy", name)
	if err != nil {
		return "", err
	}
	if text == "" {
		return (&netpolicy.Policy{}).String(), nil
	}
	return text, nil
}

// templatePolicy is template name's own policy for verb, "" if it has
// none (or the runtime has no templates with policies).
func (p *Plane) templatePolicy(verb, name string) (string, error) {
	tp, ok := p.rt.(TemplatePolicies)
	if !ok || p.rt == nil {
		return "", nil
	}
	text, err := tp.TemplatePolicy(name)
	if err != nil {
		return "", Errorf(Errno(err), "%s: %s", verb, errText(err))
	}
	return text, nil
}
