package ctl

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl/msg"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	g, sb := GlobalVerbs, SandboxVerbs
	tests := []struct {
		name  string
		table Table
		in    string
		want  Command
		errno syscall.Errno
		text  string // the error text, when errno != 0 ("" = any)
	}{
		// Shape of a message.
		{name: "plain", table: sb, in: "pause", want: Command{Verb: "pause"}},
		{name: "trailing newline", table: sb, in: "pause\n", want: Command{Verb: "pause"}},
		{name: "two newlines", table: sb, in: "pause\n\n", errno: syscall.EINVAL, text: `ctl: more than one line "pause\n"`},
		{name: "second line", table: sb, in: "pause\nkill\n", errno: syscall.EINVAL, text: `ctl: more than one line "pause\nkill"`},
		{name: "crlf", table: sb, in: "pause\r\n", errno: syscall.EINVAL},
		{name: "blanks", table: sb, in: " \tcpus   2 \t", want: Command{Verb: "cpus", Args: []string{"2"}, Config: Config{CPUs: 2}}},
		{name: "empty", table: sb, in: "", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "only newline", table: sb, in: "\n", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "only blanks", table: sb, in: "  \t ", errno: syscall.EINVAL, text: "ctl: empty message"},
		{name: "nul", table: sb, in: "pause\x00", errno: syscall.EINVAL, text: `ctl: control character in message "pause\x00"`},
		{name: "escape", table: sb, in: "\x1b[2J", errno: syscall.EINVAL},
		{name: "del", table: sb, in: "pause\x7f", errno: syscall.EINVAL},
		{name: "c1 control", table: sb, in: "pause\u0085", errno: syscall.EINVAL},
		{name: "invalid utf8", table: sb, in: "pause \xff\xfe", errno: syscall.EINVAL, text: `ctl: message is not UTF-8 text "pause \xff\xfe"`},
		{name: "too long", table: sb, in: "timeout " + strings.Repeat("9", MaxMessage), errno: syscall.E2BIG, text: "ctl: message too long (4104 bytes, max 4096)"},
		{name: "max size ok", table: g, in: "new " + strings.Repeat(" ", MaxMessage-8) + "t1\n", want: Command{Verb: "new", Args: []string{"t1"}, ID: "t1"}},

		// Verbs match whole words only.
		{name: "unknown verb", table: sb, in: "bogus", errno: syscall.EINVAL, text: `ctl: unknown verb "bogus"`},
		{name: "prefix", table: sb, in: "paus", errno: syscall.EINVAL, text: `ctl: unknown verb "paus"`},
		{name: "longer", table: sb, in: "pauses", errno: syscall.EINVAL},
		{name: "case", table: sb, in: "PAUSE", errno: syscall.EINVAL},
		{name: "global verb on sandbox", table: sb, in: "rm t1", errno: syscall.EINVAL},
		{name: "sandbox verb on global", table: g, in: "pause", errno: syscall.EINVAL},

		// Arity.
		{name: "too many", table: sb, in: "pause now", errno: syscall.EINVAL, text: `pause: too many arguments "pause now" (usage: pause)`},
		{name: "missing", table: sb, in: "cpus", errno: syscall.EINVAL, text: `cpus: missing argument "cpus" (usage: cpus <n>)`},
		{name: "kill id missing", table: g, in: "kill", errno: syscall.EINVAL},
		{name: "kill id", table: g, in: "kill t1", want: Command{Verb: "kill", Args: []string{"t1"}, ID: "t1"}},
		{name: "kill two", table: g, in: "kill t1 t2", errno: syscall.EINVAL},
		{name: "rm", table: g, in: "rm a-b", want: Command{Verb: "rm", Args: []string{"a-b"}, ID: "a-b"}},

		// Quoting.
		{name: "quoted", table: sb, in: "template 'base'", want: Command{Verb: "template", Args: []string{"base"}, Config: Config{Template: "base"}}},
		{name: "quoted verb", table: sb, in: "'pause'", want: Command{Verb: "pause"}},
		{name: "quoted blank", table: sb, in: "template 'a b'", errno: syscall.EINVAL, text: `template: invalid template name "a b" (want [a-z0-9][a-z0-9-]{0,62})`},
		{name: "doubled quote", table: sb, in: "template 'it''s'", errno: syscall.EINVAL, text: `template: invalid template name "it's" (want [a-z0-9][a-z0-9-]{0,62})`},
		{name: "rc concatenation", table: sb, in: "template a'b'c", want: Command{Verb: "template", Args: []string{"abc"}, Config: Config{Template: "abc"}}},
		{name: "empty quoted", table: sb, in: "template ''", errno: syscall.EINVAL, text: `template: invalid template name "" (want [a-z0-9][a-z0-9-]{0,62})`},
		{name: "unterminated", table: sb, in: "template 'base", errno: syscall.EINVAL, text: `ctl: unterminated quote "template 'base"`},
		{name: "unterminated after doubled", table: sb, in: "template 'a''", errno: syscall.EINVAL},
		{name: "quoted newline still a second line", table: sb, in: "template 'a\nb'", errno: syscall.EINVAL},

		// new and its keys.
		{name: "new bare", table: g, in: "new", want: Command{Verb: "new"}},
		{name: "new name", table: g, in: "new t1\n", want: Command{Verb: "new", Args: []string{"t1"}, ID: "t1"}},
		{name: "new all keys", table: g, in: "new t1 template=py mem=1G cpus=2 world=w1 timeout=5m",
			want: Command{Verb: "new", Args: []string{"t1"}, ID: "t1",
				Keys:   map[string]string{"template": "py", "mem": "1G", "cpus": "2", "world": "w1", "timeout": "5m"},
				Config: Config{Template: "py", MemBytes: 1 << 30, CPUs: 2, World: "w1", Timeout: 5 * time.Minute}}},
		{name: "new keys only", table: g, in: "new mem=512M", want: Command{Verb: "new", Keys: map[string]string{"mem": "512M"}, Config: Config{MemBytes: 512 << 20}}},
		{name: "new keys before name", table: g, in: "new cpus=4 box", want: Command{Verb: "new", Args: []string{"box"}, ID: "box", Keys: map[string]string{"cpus": "4"}, Config: Config{CPUs: 4}}},
		{name: "new two names", table: g, in: "new a b", errno: syscall.EINVAL},
		{name: "new bad name", table: g, in: "new T1", errno: syscall.EINVAL, text: `new: invalid sandbox name "T1" (want [a-z0-9][a-z0-9-]{0,62})`},
		{name: "new name leading dash", table: g, in: "new -x", errno: syscall.EINVAL},
		{name: "new name too long", table: g, in: "new " + strings.Repeat("a", 64), errno: syscall.EINVAL},
		{name: "new name 63", table: g, in: "new " + strings.Repeat("a", 63), want: Command{Verb: "new", Args: []string{strings.Repeat("a", 63)}, ID: strings.Repeat("a", 63)}},
		{name: "new unknown key", table: g, in: "new foo=1", errno: syscall.EINVAL, text: `new: unknown key "foo=1"`},
		{name: "new repeated key", table: g, in: "new mem=1G mem=2G", errno: syscall.EINVAL, text: `new: repeated key "mem=2G"`},
		{name: "new empty value", table: g, in: "new mem=", errno: syscall.EINVAL, text: `new: invalid size "mem=" (want e.g. 256M or 1G)`},
		{name: "new empty key", table: g, in: "new =1", errno: syscall.EINVAL, text: `new: unknown key "=1"`},
		{name: "new quoted key", table: g, in: "new 'mem=1G'", want: Command{Verb: "new", Keys: map[string]string{"mem": "1G"}, Config: Config{MemBytes: 1 << 30}}},
		{name: "new bad cpus", table: g, in: "new cpus=0", errno: syscall.EINVAL, text: `new: count out of range "cpus=0" (want 1..32)`},
		{name: "key on keyless verb", table: sb, in: "template a=b", errno: syscall.EINVAL},

		// Values.
		{name: "cpus x", table: sb, in: "cpus x", errno: syscall.EINVAL, text: `cpus: invalid count "x" (want 1..32)`},
		{name: "cpus 0", table: sb, in: "cpus 0", errno: syscall.EINVAL, text: `cpus: count out of range "0" (want 1..32)`},
		{name: "cpus 33", table: sb, in: "cpus 33", errno: syscall.EINVAL},
		{name: "cpus 32", table: sb, in: "cpus 32", want: Command{Verb: "cpus", Args: []string{"32"}, Config: Config{CPUs: 32}}},
		{name: "cpus +1", table: sb, in: "cpus +1", errno: syscall.EINVAL},
		{name: "cpus -1", table: sb, in: "cpus -1", errno: syscall.EINVAL},
		{name: "cpus huge", table: sb, in: "cpus 99999999999999999999", errno: syscall.EINVAL},
		{name: "mem 256M", table: sb, in: "mem 256M", want: Command{Verb: "mem", Args: []string{"256M"}, Config: Config{MemBytes: 256 << 20}}},
		{name: "mem 1g", table: sb, in: "mem 1g", want: Command{Verb: "mem", Args: []string{"1g"}, Config: Config{MemBytes: 1 << 30}}},
		{name: "mem bytes", table: sb, in: "mem 134217728", want: Command{Verb: "mem", Args: []string{"134217728"}, Config: Config{MemBytes: 128 << 20}}},
		{name: "mem 65536K", table: sb, in: "mem 65536K", want: Command{Verb: "mem", Args: []string{"65536K"}, Config: Config{MemBytes: 64 << 20}}},
		{name: "mem too small", table: sb, in: "mem 1M", errno: syscall.EINVAL, text: `mem: size out of range "1M" (want 64M..64G)`},
		{name: "mem too big", table: sb, in: "mem 1T", errno: syscall.EINVAL},
		{name: "mem overflow", table: sb, in: "mem 99999999999999999G", errno: syscall.EINVAL},
		{name: "mem not MiB", table: sb, in: "mem 65537K", errno: syscall.EINVAL, text: `mem: size not a whole number of MiB "65537K"`},
		{name: "mem junk", table: sb, in: "mem lots", errno: syscall.EINVAL},
		{name: "mem suffix only", table: sb, in: "mem M", errno: syscall.EINVAL},
		{name: "mem MiB", table: sb, in: "mem 256MiB", errno: syscall.EINVAL},
		{name: "mem negative", table: sb, in: "mem -256M", errno: syscall.EINVAL},
		{name: "mem fraction", table: sb, in: "mem 1.5G", errno: syscall.EINVAL},
		{name: "timeout seconds", table: sb, in: "timeout 300", want: Command{Verb: "timeout", Args: []string{"300"}, Config: Config{Timeout: 5 * time.Minute}}},
		{name: "timeout duration", table: sb, in: "timeout 1h30m", want: Command{Verb: "timeout", Args: []string{"1h30m"}, Config: Config{Timeout: 90 * time.Minute}}},
		{name: "timeout 0", table: sb, in: "timeout 0", want: Command{Verb: "timeout", Args: []string{"0"}}},
		{name: "timeout negative", table: sb, in: "timeout -5s", errno: syscall.EINVAL},
		{name: "timeout sub-second", table: sb, in: "timeout 10ms", errno: syscall.EINVAL},
		{name: "timeout too long", table: sb, in: "timeout 9999h", errno: syscall.EINVAL},
		{name: "timeout junk", table: sb, in: "timeout soon", errno: syscall.EINVAL, text: `timeout: invalid duration "soon" (want e.g. 300, 90s, 5m, 1h; 0 for none)`},
		{name: "world", table: sb, in: "world w1", want: Command{Verb: "world", Args: []string{"w1"}, Config: Config{World: "w1"}}},
		{name: "start", table: sb, in: "start\n", want: Command{Verb: "start"}},
		{name: "kill", table: sb, in: "kill", want: Command{Verb: "kill"}},

		// Long inputs are cut in error texts.
		{name: "long unknown", table: sb, in: strings.Repeat("x", 100), errno: syscall.EINVAL, text: `ctl: unknown verb "` + strings.Repeat("x", msg.CiteMax) + `"...`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in), tt.table)
			if tt.errno != 0 {
				var ce *Error
				if !errors.As(err, &ce) || ce.Errno != tt.errno {
					t.Fatalf("Parse(%q) = _, %v (%d); want %v", tt.in, err, Errno(err), tt.errno)
				}
				if tt.text != "" && err.Error() != tt.text {
					t.Fatalf("Parse(%q) = _, %q; want %q", tt.in, err.Error(), tt.text)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) = _, %v; want %v", tt.in, err, tt.want)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestErrorTextShape checks that every parse error reads
// `verb: reason`, lower case, no final period, one line.
func TestErrorTextShape(t *testing.T) {
	inputs := []string{"", "bogus", "cpus x", "mem 1", "new T", "new a=b", "kill", "pause\nkill", "'x", "\xff", strings.Repeat("a", 5000)}
	for _, in := range inputs {
		for _, tab := range []Table{GlobalVerbs, SandboxVerbs} {
			_, err := Parse([]byte(in), tab)
			if err == nil {
				continue
			}
			text := err.Error()
			verb, reason, ok := strings.Cut(text, ": ")
			if !ok || verb == "" || strings.ToLower(verb) != verb || strings.Contains(verb, " ") ||
				reason == "" || strings.HasSuffix(text, ".") || strings.ContainsAny(text, "\n") {
				t.Errorf("Parse(%q) error text %q; want `verb: reason \"input\"`", in, text)
			}
		}
	}
}

// TestTables checks every row: complete, one handler for its file, a
// setting behind every key and one-setting verb, and a doc whose
// "Required state:" agrees with Needs.
func TestTables(t *testing.T) {
	for name, tab := range map[string]Table{"global": GlobalVerbs, "sandbox": SandboxVerbs, "snapshot": SnapshotVerbs, "world": WorldVerbs} {
		seen := map[string]bool{}
		for _, v := range tab {
			if seen[v.Name] {
				t.Errorf("%s table: verb %q twice", name, v.Name)
			}
			seen[v.Name] = true
			if !strings.HasPrefix(v.Usage, v.Name) || v.Doc == "" || v.Min > v.Max {
				t.Errorf("%s table: verb %q: incomplete entry (usage %q, min %d, max %d)", name, v.Name, v.Usage, v.Min, v.Max)
			}
			if !strings.Contains(v.Doc, "Errors:") && !strings.Contains(v.Doc, "Required state:") {
				t.Errorf("%s table: verb %q: doc lacks required state or errors", name, v.Name)
			}
			if (name == "global") != (v.Run.plane != nil) || (name == "sandbox") != (v.Run.sandbox != nil || v.Run.reply != nil) || (v.Run.sandbox != nil && v.Run.reply != nil) || (name == "snapshot") != (v.Run.snap != nil) || (name == "world") != (v.Run.world != nil) {
				t.Errorf("%s table: verb %q: needs exactly the %s handler", name, v.Name, name)
			}
			for _, k := range v.Keys {
				if settings[k] == nil && !(v.Name == "clone" && k == "concurrency") && !(name == "global" && (v.Name == "world" || v.Name == "retain")) {
					t.Errorf("%s table: verb %q: key %q has no setting", name, v.Name, k)
				}
			}
			if _, ok := settings[v.Name]; ok && name == "sandbox" && (v.Min != 1 || v.Max != 1 || v.Run.check == nil) {
				t.Errorf("%s table: verb %q is named like a setting but does not set one", name, v.Name)
			}
			if _, st, ok := strings.Cut(v.Doc, "Required state: "); ok {
				want := "any"
				if v.Needs != nil {
					want = strings.TrimSuffix(v.Needed(), " ("+v.NeedsWhy+")")
				}
				if !strings.HasPrefix(st, want) {
					t.Errorf("%s table: verb %q: doc says required state %.30q...; Needs says %q", name, v.Name, st, want)
				}
			}
		}
	}
	for _, v := range []string{"template", "mem", "cpus", "world", "timeout"} {
		if SandboxVerbs.Lookup(v) == nil || settings[v] == nil {
			t.Errorf("setting %q: no verb or no setting", v)
		}
	}
}

// TestConfigure checks that each one-setting verb before start sets its
// setting and only it.
func TestConfigure(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want Config
	}{
		{"template t2", Config{Template: "t2"}},
		{"mem 1G", Config{MemBytes: 1 << 30}},
		{"cpus 3", Config{CPUs: 3}},
		{"world w", Config{World: "w"}},
	} {
		c, err := Parse([]byte(tt.msg), SandboxVerbs)
		if err != nil {
			t.Fatalf("Parse(%q) = _, %v", tt.msg, err)
		}
		if got := (Config{}).with(c.Config); got != tt.want {
			t.Errorf("Config{}.with(Parse(%q).Config) = %+v; want %+v", tt.msg, got, tt.want)
		}
	}
}

func TestQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"a", "", "a b", "it's", "''", " ", "a\tb", "x=y z"} {
		m := "template " + msg.Quote(s)
		words, err := rules.Split([]byte(m))
		if err != nil || len(words) != 2 || words[1] != s {
			t.Errorf("Split(%q) = %q, %v; want [template %q]", m, words, err, s)
		}
	}
}

func TestCommandString(t *testing.T) {
	in := "new 'box' mem=1G cpus=2"
	c, err := Parse([]byte(in), GlobalVerbs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.String(), "new box cpus=2 mem=1G"; got != want {
		t.Errorf("Parse(%q).String() = %q; want %q", in, got, want)
	}
	c2, err := Parse([]byte(c.String()), GlobalVerbs)
	if err != nil || !cmp.Equal(c, c2) {
		t.Errorf("Parse(String()) = %+v, %v; want %+v", c2, err, c)
	}
}

func TestSizes(t *testing.T) {
	for _, tt := range []struct {
		n    uint64
		text string
	}{{256 << 20, "256M"}, {1 << 30, "1G"}, {1536 << 20, "1536M"}, {4097 << 10, "4097K"}, {1 << 40, "1T"}, {1000, "1000"}, {0, "0"}} {
		if got := FormatSize(tt.n); got != tt.text {
			t.Errorf("FormatSize(%d) = %q; want %q", tt.n, got, tt.text)
		}
		if got, ok := ParseSize(tt.text); !ok || got != tt.n {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, true", tt.text, got, ok, tt.n)
		}
	}
}

func TestFormatTimeout(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{0, "0"}, {5 * time.Minute, "5m"}, {time.Hour, "1h"}, {90 * time.Minute, "1h30m"}, {90 * time.Second, "1m30s"}, {30 * time.Second, "30s"}, {time.Hour + time.Second, "1h0m1s"}} {
		if got := formatTimeout(tt.d); got != tt.want {
			t.Errorf("formatTimeout(%v) = %q; want %q", tt.d, got, tt.want)
		}
		if tt.d != 0 {
			if back, ok := ParseTimeout(tt.want); !ok || back != tt.d {
				t.Errorf("ParseTimeout(%q) = %v, %v; want %v", tt.want, back, ok, tt.d)
			}
		}
	}
}

func TestErrno(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{Errorf(syscall.EBUSY, "x"), syscall.EBUSY},
		{errors.Join(errors.New("a"), Errorf(syscall.ENOENT, "x")), syscall.ENOENT},
		{wrap(Errorf(syscall.EEXIST, "x")), syscall.EEXIST},
		{syscall.EPERM, syscall.EPERM},
		{wrap(syscall.ENOSPC), syscall.ENOSPC},
		{contextCanceled(), syscall.EINTR},
		{errors.New("boom"), syscall.EIO},
	} {
		if got := Errno(tt.err); got != tt.want {
			t.Errorf("Errno(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
	if err := error(Errorf(syscall.EBUSY, "pause: x")); !errors.Is(err, syscall.EBUSY) || err.Error() != "pause: x" {
		t.Errorf("Errorf(EBUSY, ...) = %v; want errors.Is EBUSY and text", err)
	}
}
