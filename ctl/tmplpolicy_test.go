package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestTemplatePolicyFile: <templates>/<t>.policy, parsed to canonical
// text; none is ""; bad text, a directory, a FIFO or a bad name is an
// error that names the template.
func TestTemplatePolicyFile(t *testing.T) {
	dir := t.TempDir()
	r := &VMMRuntime{TemplatesDir: dir}
	if got, err := r.TemplatePolicy("base"); got != "" || err != nil {
		t.Errorf("no file: %q, %v; want \"\", nil", got, err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("base.policy", "# the template's\nallow 10.0.0.0/8\ndeny 10.1.0.0/16\nallow example.com\n")
	if got, err := r.TemplatePolicy("base"); got != "default deny\nallow 10.0.0.0/8\ndeny 10.1.0.0/16\nallow example.com\n" || err != nil {
		t.Errorf("base: %q, %v", got, err)
	}
	write("bad.policy", "allow 10.0.0.0/8\npermit 1.2.3.4\n")
	if _, err := r.TemplatePolicy("bad"); Errno(err) != syscall.EINVAL || !strings.Contains(err.Error(), "template bad: ") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad: %v; want EINVAL naming the template and line 2", err)
	}
	write("big.policy", strings.Repeat("allow 10.0.0.1\n", 5000))
	if _, err := r.TemplatePolicy("big"); err == nil {
		t.Error("a policy over netpolicy.TextMax was taken")
	}
	if err := os.Mkdir(filepath.Join(dir, "d.policy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "f.policy"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"d", "f"} {
		if _, err := r.TemplatePolicy(n); Errno(err) != syscall.EINVAL {
			t.Errorf("%s: %v; want EINVAL (not a regular file)", n, err)
		}
	}
	if _, err := r.TemplatePolicy("../base"); Errno(err) != syscall.EINVAL {
		t.Errorf("../base: %v; want EINVAL", err)
	}
}

// policyRuntime is a fake runtime whose templates carry policies.
type policyRuntime struct {
	*fakeRuntime
	policies map[string]string // by template; a value "!" is an error
}

func (r policyRuntime) TemplatePolicy(name string) (string, error) {
	if r.policies[name] == "!" {
		return "", Errorf(syscall.EINVAL, "template %s: %s.policy: line 1: unknown verb", name, name)
	}
	return r.policies[name], nil
}

// TestNewTemplatePolicy: a new without net= starts with its template's
// policy (new's own net= wins; a template without one gives default
// deny); a template whose policy is bad fails the new with its error and
// creates nothing.
func TestNewTemplatePolicy(t *testing.T) {
	rt := policyRuntime{newFakeRuntime(), map[string]string{"base": "default deny\nallow 10.0.0.0/8\n", "bad": "!"}}
	p, _ := openPlane(t, t.TempDir(), rt)
	newPolicies(t, p, rt.fakeRuntime, []newPolicy{
		{"new a", "default deny\nallow 10.0.0.0/8\n"},
		{"new b net=allow", "default allow\n"},
		{"new c template=other", "default deny\n"},
	})
	if got, err := p.TemplatePolicy("base"); got != "default deny\nallow 10.0.0.0/8\n" || err != nil {
		t.Errorf("TemplatePolicy(base) = %q, %v", got, err)
	}
	if got, err := p.TemplatePolicy("other"); got != "default deny\n" || err != nil {
		t.Errorf("TemplatePolicy(other) = %q, %v; want default deny", got, err)
	}
	_, err := p.Ctl(ctx(t), []byte("new d template=bad"))
	if Errno(err) != syscall.EINVAL || !strings.Contains(err.Error(), "template bad") {
		t.Errorf("new from a template with a bad policy: %v; want EINVAL naming it", err)
	}
	if _, err := p.Lookup("d"); err == nil {
		t.Error("the failed new left sandbox d")
	}
}
