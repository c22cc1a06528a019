package testenv

import "testing"

func TestMatchPackage(t *testing.T) {
	for _, c := range []struct {
		line, rel string
		want      bool
	}{
		{"./vmm", "vmm", true},
		{"./vmm", "vmm/kvm", false},
		{"./vmm/...", "vmm/kvm", true},
		{"./vmm/...", "vmm", true},
		{"./vmm/...", "vmmx", false},
		{"./ctl", "fs", false},
		{"", "vmm", false},
		{"./...", "fs", true},
	} {
		if got := matchPackage(c.line, c.rel); got != c.want {
			t.Errorf("matchPackage(%q, %q) = %v, want %v", c.line, c.rel, got, c.want)
		}
	}
}

// TestThisPackageIsNotForTheLab: listedForLab refuses a package that
// test/lab-packages does not name (this one), so a CI skip there fails.
func TestThisPackageIsNotForTheLab(t *testing.T) {
	if err := listedForLab(); err == nil {
		t.Fatal("test/testenv reported as listed in test/lab-packages")
	}
}

func TestStatusPid(t *testing.T) {
	for status, want := range map[string]int{
		"a running template=base pid=4242 limits=cgroup2": 4242,
		"a dead template=base pid=0 limits=-":             0,
		"a paused template=base":                          0,
	} {
		if got := StatusPid(status); got != want {
			t.Errorf("StatusPid(%q) = %d; want %d", status, got, want)
		}
	}
}
