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
