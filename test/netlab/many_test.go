// TestNetworkMany restores 20 guests in one test: a guest the lab's
// emulation resets or stalls (docs/lab.md) fails it, and run-tests.sh
// runs it again (at most twice) when the failure shows that fault's
// signature (the harness asks a failed sandbox's VMM for its dump).
// `make test-netmany` runs it alone.

package netlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sandfs/netpolicy"
	"sandfs/test/labnet"
)

// manyN is the number of sandboxes of TestNetworkMany.
const manyN = 20

// manyBox is sandbox i of TestNetworkMany. Its target is the server at
// 198.51.100.<i+1>, whose name is t<i+1>.test; its policy opens that
// target and nothing else of the servers' /24, in one of three ways by
// i mod 4: 0 an address rule (allow 198.51.100.X/32); 2 default allow,
// the /24 denied and the /32 allowed (the longest prefix wins); 1 and
// 3 the target's name (allow tX.test), opened by the sandbox's
// resolver's answer. Each policy is its own.
type manyBox struct {
	id, target, name string // name: t<i+1>.test
	policy           string // new's net= value
	byName           bool   // the policy allows name, not target
	ask              string // another box's name, asked for: refused
	others           []string
}

func manyBoxes() []manyBox {
	target := func(i int) string { return fmt.Sprintf("198.51.100.%d", i%manyN+1) }
	name := func(i int) string { return fmt.Sprintf("t%d.test", i%manyN+1) }
	var bs []manyBox
	for i := range manyN {
		b := manyBox{id: fmt.Sprintf("m%d", i+1), target: target(i), name: name(i)}
		switch i % 4 {
		case 0:
			b.policy = "allow " + b.target + "/32"
		case 2:
			b.policy = "default allow; deny 198.51.100.0/24; allow " + b.target + "/32"
		default:
			b.policy, b.byName = "allow "+b.name, true
		}
		// A box asks for the name of a box allowed by name (odd i),
		// and tries the targets of a box of the other parity (i+1,
		// i+7) and of its own (i+10): address and name policies both.
		b.ask = name(i + 1 + i%2)
		b.others = []string{target(i + 1), target(i + 7), target(i + 10)}
		bs = append(bs, b)
	}
	return bs
}

// manySh is the one script a guest of TestNetworkMany runs (bash, for
// /dev/tcp; one line: an exec is one command). Arguments: the box's
// target address ("-" for a box allowed by name), its name ("-" for a
// box allowed by address), another box's name, then other boxes'
// target addresses. It prints one line per try:
//
//	dns <name> <address|->    getent ahostsv4 through the sandbox's resolver
//	tcp <address> <line|refused|err <error>>    port 8080 (the line: hello ...)
//
// in this order: its own name, the other name, its own target (the
// address its name gave), the others' targets. The server holds the
// answer to the own target until every box has reached its own
// (manyBarrier), so every box tries the others' targets after every
// box has resolved its name: a learned address leaking into another
// sandbox's filter would let the try through. Lean for the lab's
// emulation: bash's own /dev/tcp in a subshell (a fork, no exec), getent
// the only program run; no timeout is needed where the filter resets
// (the own target's read waits up to 240 s; a SYN wrongly dropped would
// fail after the kernel's retries, about two minutes).
var manySh = strings.Join([]string{
	`dns() { a=$(getent ahostsv4 "$1"); a=${a%% *}; echo "dns $1 ${a:--}"; }`,
	`tcp() { r=$( { exec 3<>/dev/tcp/$1/8080 && read -r -t 240 l <&3 && echo "$l"; } 2>&1 ); ` +
		`case $r in hello*) echo "tcp $1 $r";; *refused*) echo "tcp $1 refused";; *) echo "tcp $1 err $r";; esac; }`,
	`own=$1`,
	`if [ "$2" != - ]; then dns "$2"; own=$a; fi`,
	`dns "$3"`,
	`tcp "$own"`,
	`shift 3`,
	`for x; do tcp "$x"; done`,
}, "; ")

// cmd is the exec command of box b: manySh with its arguments.
func (b manyBox) cmd() string {
	own, name := b.target, "-"
	if b.byName {
		own, name = "-", b.name
	}
	return "bash -c '" + manySh + "' many " + strings.Join(append([]string{own, name, b.ask}, b.others...), " ")
}

// want is the output box b's script must print.
func (b manyBox) want() string {
	var w []string
	if b.byName {
		w = append(w, "dns "+b.name+" "+b.target)
	}
	w = append(w, "dns "+b.ask+" -", "tcp "+b.target+" hello "+b.target)
	for _, o := range b.others {
		w = append(w, "tcp "+o+" refused")
	}
	return strings.Join(w, "\n") + "\n"
}

// audit is the net/audit lines box b's script must make, as fields 1-4
// (proto, destination, domain, verdict).
func (b manyBox) audit() [][]string {
	var w [][]string
	domain := "-"
	if b.byName {
		domain = b.name
		w = append(w, []string{"dns", b.target, b.name, "answered"})
	}
	w = append(w, []string{"dns", "-", b.ask, "refused"}, []string{"tcp", b.target + ":8080", domain, "allow"})
	for _, o := range b.others {
		w = append(w, []string{"tcp", o + ":8080", "-", "reset"})
	}
	return w
}

// foreign reports whether audit line fields f show box b reaching what
// its policy does not allow: a TCP connection allowed to another
// address, or an answer for another name.
func (b manyBox) foreign(f []string) bool {
	if len(f) < 6 {
		return false
	}
	return f[1] == "tcp" && f[4] == "allow" && f[2] != b.target+":8080" ||
		f[1] == "dns" && f[4] == "answered" && f[3] != b.name
}

// TestNetworkMany: 20 sandboxes with different policies do not affect
// each other (issue 13). Each allows exactly its own target among 20
// servers (manyBox: by address, by a /32 in a denied /24 under default
// allow, or by name through its own resolver and a fake upstream on the
// lab's loopback), and its guest runs one script (one exec) that
// resolves its own name and another's, reaches its own target and tries
// three others'. Each guest must reach exactly its own (the others
// refused: the filter's reset), get NXDOMAIN for the other name, and
// its net/audit must say so with no line of anything else allowed; its
// net/policy reads back as its own. Kept lean for the lab: 64 MiB
// guests, one exec per guest, the phases' durations logged.
func TestNetworkMany(t *testing.T) {
	need(t)
	t0 := time.Now()
	phase := func(what string) {
		t.Logf("phase: %s at %s", what, time.Since(t0).Round(100*time.Millisecond))
	}
	boxes := manyBoxes()
	bar := newManyBarrier(manyN, 2*time.Minute)
	t.Cleanup(bar.release)
	var targets []string
	for _, b := range boxes {
		targets = append(targets, b.target)
	}
	labnet.Servers(t, targets, bar.serve)
	up := startUpstream(t)
	t.Setenv("SANDFS_RESOLVER", up)
	var tdown time.Time
	t.Cleanup(func() { t.Logf("phase: teardown took %s", time.Since(tdown).Round(100*time.Millisecond)) })
	d := startDaemon(t)
	t.Cleanup(func() { tdown = time.Now() })
	phase("daemon mounted")

	// The first new builds the template's 64 MiB snapshot; the others
	// restore it, 4 at a time.
	newBox := func(b manyBox) error {
		_, err := d.sh(`echo "new ` + b.id + ` mem=64M net='` + b.policy + `'" > ctl`)
		return err
	}
	must(t, newBox(boxes[0]))
	phase("first sandbox made (template snapshot)")
	parallel(1, manyN-1, 4, func(i int) {
		if err := newBox(boxes[i]); err != nil {
			t.Errorf("new %s: %v", boxes[i].id, err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	phase(fmt.Sprintf("%d sandboxes made", manyN))

	// Each guest's one script, all at once; the servers answer when
	// every box has reached its own target.
	outs, times := make([]string, manyN), make([]string, manyN)
	sec := func(at time.Time) string { return fmt.Sprintf("%.0fs", at.Sub(t0).Seconds()) }
	parallel(0, manyN-1, manyN, func(i int) {
		b := boxes[i]
		out, started, err := d.execWait(b.id, b.cmd(), 2*time.Minute, 5*time.Minute)
		outs[i], times[i] = out, b.id+" "+sec(started)+"-"+sec(time.Now())
		if err != nil {
			d.fail(b.id)
			t.Errorf("%s: exec: %v (output %q)", b.id, err, out)
		}
	})
	first, opened, full := bar.times()
	t.Logf("scripts (started-ended): %s; own targets: first reached at %s, all %v, answered at %s",
		strings.Join(times, ", "), sec(first), full, sec(opened))
	phase("scripts done")
	for i, b := range boxes {
		if outs[i] != b.want() {
			d.fail(b.id)
			t.Errorf("%s (net='%s') printed:\n%s want:\n%s", b.id, b.policy, outs[i], b.want())
		}
	}

	// Each sandbox's audit and policy.
	parallel(0, manyN-1, 4, func(i int) {
		b := boxes[i]
		seen, missing, _ := labnet.ReadAudit(filepath.Join(d.mnt, "sandboxes", b.id, "net/audit"), b.audit(), time.Minute,
			func(f, w []string) bool { return len(f) >= 6 && slices.Equal(f[1:5], w) })
		for _, l := range seen {
			if b.foreign(strings.Fields(l)) {
				d.fail(b.id)
				t.Errorf("%s: net/audit: %q: not allowed by its policy", b.id, l)
			}
		}
		if len(missing) > 0 {
			d.fail(b.id)
			t.Errorf("%s: net/audit lines %q; no line for %q", b.id, seen, missing)
		}
		p, err := netpolicy.Parse([]byte(strings.ReplaceAll(b.policy, ";", "\n")))
		if err != nil {
			t.Errorf("%s: %v", b.id, err)
			return
		}
		got, err := os.ReadFile(filepath.Join(d.mnt, "sandboxes", b.id, "net/policy"))
		if err != nil || string(got) != p.String() {
			t.Errorf("%s: net/policy %q, %v; want %q", b.id, got, err, p.String())
		}
	})
	phase("audits and policies checked")
}

// execWait writes cmdline to sandbox id's exec, again while the write
// fails (the guest not up yet) for up to start, and returns the
// command's output, read within run, and when the write was taken.
func (d *daemon) execWait(id, cmdline string, start, run time.Duration) (string, time.Time, error) {
	path := filepath.Join(d.mnt, "sandboxes", id, "exec")
	for deadline := time.Now().Add(start); ; {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write([]byte(cmdline))
			f.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", time.Now(), fmt.Errorf("write exec: %v", err)
		}
		time.Sleep(time.Second)
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	cmd := exec.CommandContext(ctx, "dd", "if="+path, "bs=65536")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	return string(out), started, err
}

// manyBarrier holds the servers' answers until every one of n addresses
// has had a connection, or until wait has passed since the first.
type manyBarrier struct {
	n    int
	wait time.Duration
	open chan struct{} // closed by release

	mu     sync.Mutex
	seen   map[string]bool // addresses connected to; guarded by mu
	first  time.Time       // the first connection; guarded by mu
	opened time.Time       // when release was first called; guarded by mu
	full   bool            // opened by the last address's connection; guarded by mu
}

func newManyBarrier(n int, wait time.Duration) *manyBarrier {
	return &manyBarrier{n: n, wait: wait, open: make(chan struct{}), seen: map[string]bool{}}
}

// serve answers each connection to l with "hello <l's address>" once
// the barrier is open.
func (b *manyBarrier) serve(l net.Listener) {
	a := labnet.ListenerIP(l)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		b.arrive(a)
		go func() {
			<-b.open
			fmt.Fprintf(c, "hello %s\n", a)
			c.Close()
		}()
	}
}

// arrive notes a connection to address a.
func (b *manyBarrier) arrive(a string) {
	b.mu.Lock()
	if len(b.seen) == 0 {
		b.first = time.Now()
		time.AfterFunc(b.wait, b.release)
	}
	b.seen[a] = true
	full := len(b.seen) == b.n && b.opened.IsZero()
	b.full = b.full || full
	b.mu.Unlock()
	if full {
		b.release()
	}
}

// release opens the barrier (once).
func (b *manyBarrier) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opened.IsZero() {
		b.opened = time.Now()
		close(b.open)
	}
}

// times are when the first connection came, when the barrier opened
// (zero: not yet) and whether every address's connection opened it.
func (b *manyBarrier) times() (first, opened time.Time, full bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.first, b.opened, b.full
}

// startUpstream serves DNS over UDP on the lab's loopback, the daemon's
// upstream resolver: t<N>.test (N 1..manyN) is 198.51.100.N, any other
// name NXDOMAIN (labnet.DNS). It returns its address.
func startUpstream(t *testing.T) string {
	names := map[string]string{}
	for n := 1; n <= manyN; n++ {
		names[fmt.Sprintf("t%d.test", n)] = fmt.Sprintf("198.51.100.%d", n)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { pc.Close() })
	go (&labnet.DNS{Names: names}).Serve(pc)
	return pc.LocalAddr().String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
