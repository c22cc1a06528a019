package ctl

import (
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

// Bounds and defaults of sandbox settings.
const (
	DefaultTemplate        = "base"
	DefaultMem      uint64 = 256 << 20
	DefaultCPUs            = 1

	MinMem  uint64 = 64 << 20 // smallest guest RAM
	MaxMem  uint64 = 64 << 30 // largest guest RAM
	MemUnit uint64 = 1 << 20  // guest RAM is a whole number of MiB
	MaxCPUs        = 32       // most vCPUs per sandbox

	MaxTimeout = 30 * 24 * time.Hour // longest timeout (0 means none)
)

// ValidName reports whether s is a valid sandbox, template or world name:
// [a-z0-9][a-z0-9-]{0,62}.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ParseSize parses a memory size: a decimal number of bytes with an
// optional binary suffix K, M, G or T (case-insensitive, 1K = 1024),
// e.g. 256M, 1G, 1536m.
func ParseSize(s string) (uint64, bool) {
	mult := uint64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	if s == "" || s[0] < '0' || s[0] > '9' { // no sign, no empty number
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > (1<<64-1)/mult {
		return 0, false
	}
	return n * mult, true
}

// FormatSize formats n with the largest binary suffix that divides it
// exactly: 256M, 1G, 1536M, 4097K. ParseSize(FormatSize(n)) == n.
func FormatSize(n uint64) string {
	for _, u := range []struct {
		suffix string
		size   uint64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatUint(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

// ParseTimeout parses a timeout: a Go duration (90s, 5m, 1h30m) or a whole
// number of seconds (300); 0 means none.
func ParseTimeout(s string) (time.Duration, bool) {
	if s == "" || s[0] == '-' || s[0] == '+' {
		return 0, false
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// The check functions validate value s of a setting for verb; input is
// what the message said (s itself, or key=s) and is quoted in errors.

// checkName validates a name argument of verb.
func checkName(verb, what, s, input string) error {
	if !ValidName(s) {
		return Errorf(syscall.EINVAL, "%s: invalid %s name %s (want [a-z0-9][a-z0-9-]{0,62})", verb, what, msg.Cite(input))
	}
	return nil
}

func checkMem(verb, s, input string) (uint64, error) {
	n, ok := ParseSize(s)
	if !ok {
		return 0, Errorf(syscall.EINVAL, "%s: invalid size %s (want e.g. 256M or 1G)", verb, msg.Cite(input))
	}
	if n < MinMem || n > MaxMem {
		return 0, Errorf(syscall.EINVAL, "%s: size out of range %s (want %s..%s)", verb, msg.Cite(input), FormatSize(MinMem), FormatSize(MaxMem))
	}
	if n%MemUnit != 0 {
		return 0, Errorf(syscall.EINVAL, "%s: size not a whole number of MiB %s", verb, msg.Cite(input))
	}
	return n, nil
}

func checkCPUs(verb, s, input string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || s[0] == '+' || s[0] == '-' {
		return 0, Errorf(syscall.EINVAL, "%s: invalid count %s (want 1..%d)", verb, msg.Cite(input), MaxCPUs)
	}
	if n < 1 || n > MaxCPUs {
		return 0, Errorf(syscall.EINVAL, "%s: count out of range %s (want 1..%d)", verb, msg.Cite(input), MaxCPUs)
	}
	return n, nil
}

func checkTimeout(verb, s, input string) (time.Duration, error) {
	d, ok := ParseTimeout(s)
	if !ok {
		return 0, Errorf(syscall.EINVAL, "%s: invalid duration %s (want e.g. 300, 90s, 5m, 1h; 0 for none)", verb, msg.Cite(input))
	}
	if d > MaxTimeout || (d != 0 && d < time.Second) {
		return 0, Errorf(syscall.EINVAL, "%s: duration out of range %s (want 0 or 1s..%s)", verb, msg.Cite(input), MaxTimeout)
	}
	return d, nil
}

// Defaults returns c with unset fields (zero Template, MemBytes, CPUs) set
// to the defaults.
func (c Config) Defaults() Config {
	if c.Template == "" {
		c.Template = DefaultTemplate
	}
	if c.MemBytes == 0 {
		c.MemBytes = DefaultMem
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	return c
}

// with returns c with the settings o gives put in: its non-empty
// Template, MemBytes, CPUs, World and Net (what the one-setting verbs before
// start give; timeout has its own verb).
func (c Config) with(o Config) Config {
	if o.Template != "" {
		c.Template = o.Template
	}
	if o.MemBytes != 0 {
		c.MemBytes = o.MemBytes
	}
	if o.CPUs != 0 {
		c.CPUs = o.CPUs
	}
	if o.World != "" {
		c.World = o.World
	}
	if o.Net != "" {
		c.Net = o.Net
	}
	return c
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// formatTimeout is the status form of a timeout: 0 or a Go duration.
func formatTimeout(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String() // e.g. 1h30m0s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
