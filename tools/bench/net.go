package bench

import (
	"bytes"
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sandfs/fs/client"
	"sandfs/netpolicy"
	"sandfs/netpolicy/sbnet"
)

// netflowPy is the guest's half of `bench net` (netflow.py).
//
//go:embed netflow.py
var netflowPy []byte

// netOpts is what `bench net` sends and how often.
type netOpts struct {
	mib, conns, rounds, mem, rules int
}

// flowFig is one measurement of the guest's flow.
type flowFig struct {
	tputSecs float64 // seconds to send mib MiB and hear the server got them
	bytes    int64
	connSecs float64 // seconds for conns connections
	conns    int
}

func (f flowFig) mibps() float64 { return float64(f.bytes) / (1 << 20) / f.tputSecs }
func (f flowFig) cps() float64   { return float64(f.conns) / f.connSecs }

// netResult is the whole run: per round the flow with the filter and
// with none, and the maps' memory.
type netResult struct {
	filter, none []flowFig
	mem          []mapMem // the program's maps with the sandbox's own policy
	memN         []mapMem // the same maps with opts.rules rules
}

// netMain is `sandfs bench net`: one sandbox whose policy allows a
// server beyond the lab's namespace; a guest's TCP flow to it (a bulk
// send, then a run of connections) with the sandbox's filter on its tap
// and with no program attached, alternating, from one run; and the
// memory of the program's maps with the sandbox's policy and with
// -rules rules.
func netMain(args []string) int {
	fs := flag.NewFlagSet("bench net", flag.ContinueOnError)
	kernel := fs.String("kernel", os.Getenv("SANDFS_KERNEL"), "bzImage (default $SANDFS_KERNEL)")
	templates := fs.String("templates", os.Getenv("SANDFS_TEMPLATES"), "directory of template images (default $SANDFS_TEMPLATES)")
	scratch := fs.String("dir", filepath.Join(os.TempDir(), "nbench"), "scratch directory (the daemon's state)")
	o := netOpts{}
	fs.IntVar(&o.mib, "mib", 128, "MiB the guest sends in the throughput flow")
	fs.IntVar(&o.conns, "conns", 200, "connections in the connection-rate flow")
	fs.IntVar(&o.rounds, "rounds", 10, "rounds, each the flow with the filter and with none (the order alternates)")
	fs.IntVar(&o.mem, "mem", 256, "guest RAM in MiB")
	fs.IntVar(&o.rules, "rules", 1000, "address rules for the maps' memory")
	out := fs.String("o", "", "write the markdown report here (default stdout)")
	if err := fs.Parse(args); err != nil {
		return codeUsage
	}
	if *kernel == "" || *templates == "" || o.mib < 1 || o.conns < 1 || o.rounds < 1 || o.mem < 128 || o.rules < 1 || o.rules > 4000 {
		fmt.Fprintln(os.Stderr, "bench net: no kernel or templates, or bad -mib, -conns, -rounds, -mem, -rules")
		return codeUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench net: needs root (sandbox networks, a namespace of its own)")
		return codeError
	}
	if err := os.MkdirAll(*scratch, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "bench net:", err)
		return codeError
	}
	defer os.RemoveAll(*scratch)
	clock := initClock()
	r := &run{clock: clock, h: newHost(*kernel, filepath.Join(*templates, "base.ext4"), *scratch), n: o.rounds, log: os.Stderr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	started := time.Now()
	r.load0 = loadavg()
	res, err := r.benchNet(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench net:", err)
		return codeError
	}
	report := r.netReport(o, res, started)
	if *out == "" {
		fmt.Print(report)
		return 0
	}
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench net:", err)
		return codeError
	}
	return 0
}

// netBox is the benchmark's sandbox: the daemon, and the tap's
// namespace with a netlink handle in it.
type netBox struct {
	d    *daemon
	id   string
	ns   netns.NsHandle
	h    *netlink.Handle
	tap  int // tap0's ifindex in ns
	prog int // the daemon's program's id
}

// benchNet starts the server, the daemon and the sandbox, then measures.
func (r *run) benchNet(ctx context.Context, o netOpts) (*netResult, error) {
	r.progress("server namespace: %s:%d (sink), :%d (accept, close)", srvAddr, sinkPort, connPort)
	srv, err := startFlowServer()
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	defer srv.close()
	r.progress("daemon, sandbox nb (net='allow %s', mem=%dM)", srvAddr, o.mem)
	d, err := r.startDaemon(ctx)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	b, err := openNetBox(ctx, d, "nb", o.mem)
	if err != nil {
		return nil, err
	}
	defer b.close()
	res := &netResult{}
	if res.mem, res.memN, err = b.mapMemory(o.rules); err != nil {
		return nil, fmt.Errorf("maps: %w", err)
	}
	r.progress("  maps: %d bytes with the sandbox's policy, %d with %d rules", memSum(res.mem, true), memSum(res.memN, true), o.rules)
	// A warm-up flow, not counted: the first after the guest's boot was
	// the slowest measurement of every run (python3 and the guest's
	// page cache, the connections' first ARP and NAT entries).
	if _, err := r.netFlow(ctx, b, o, "warm-up (not counted)", true); err != nil {
		return nil, err
	}
	// The order alternates, filter then none, none then filter (F N N F
	// F N ...), so that a load that grows or falls during the run
	// weighs on both alike. Round 1's filter is the daemon's own; f is
	// the benchmark's, when attached.
	var f *netpolicy.Filter
	attached := true
	set := func(on bool) (err error) {
		switch {
		case on && !attached:
			f, err = b.attach()
		case !on && attached:
			err, f = b.detach(f), nil
		}
		attached = on && err == nil
		return err
	}
	defer func() { set(false) }()
	for i := 0; i < o.rounds; i++ {
		var figs [2]flowFig // filter, none
		for _, on := range [][2]bool{{true, false}, {false, true}}[i%2] {
			if err := set(on); err != nil {
				return nil, err
			}
			label := fmt.Sprintf("round %d, no program", i+1)
			if on {
				label = fmt.Sprintf("round %d, filter", i+1)
			}
			fig, err := r.netFlow(ctx, b, o, label, on)
			if err != nil {
				return nil, err
			}
			figs[boolInt(!on)] = fig
		}
		res.filter, res.none = append(res.filter, figs[0]), append(res.none, figs[1])
	}
	return res, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// openNetBox makes sandbox id with a policy that allows the server,
// waits for its agent, puts netflow.py in it and opens its namespace.
func openNetBox(ctx context.Context, d *daemon, id string, mem int) (*netBox, error) {
	if _, err := d.newSandbox(id, fmt.Sprintf("mem=%dM net='allow %s'", mem, srvAddr)); err != nil {
		return nil, fmt.Errorf("new: %w", err)
	}
	b := &netBox{d: d, id: id, ns: netns.None()}
	if err := d.waitGuest(ctx, id, "true"); err != nil {
		return nil, err
	}
	if _, err := d.c.CopyTo(bytes.NewReader(netflowPy), client.Remote{ID: id, Path: "/root/netflow.py"}, "", 0o644); err != nil {
		return nil, err
	}
	pid, err := statusPid(d, "sandboxes/"+id+"/status")
	if err != nil {
		return nil, err
	}
	if b.ns, err = sbnet.TapNS(pid); err != nil {
		return nil, fmt.Errorf("sandbox %s (pid %d): %w", id, pid, err)
	}
	if b.h, err = netlink.NewHandleAt(b.ns, unix.NETLINK_ROUTE); err != nil {
		b.close()
		return nil, err
	}
	l, err := b.h.LinkByName("tap0")
	if err != nil {
		b.close()
		return nil, fmt.Errorf("tap0: %w", err)
	}
	b.tap = l.Attrs().Index
	if b.prog, err = b.programID(); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *netBox) close() {
	if b.h != nil {
		b.h.Close()
	}
	if b.ns.IsOpen() {
		b.ns.Close()
	}
}

// sh runs script in the guest with stdout to w.
func (b *netBox) sh(ctx context.Context, script string, w io.Writer) error {
	return b.d.guestSh(ctx, b.id, script, w)
}

// programID is the id of the BPF program on tap0's ingress; an error if
// there is not exactly one.
func (b *netBox) programID() (int, error) {
	fs, err := b.h.FilterList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: b.tap}}, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		if err == syscall.EINVAL { // no clsact qdisc
			return 0, nil
		}
		return 0, fmt.Errorf("tap0's filters: %w", err)
	}
	id := 0
	for _, f := range fs {
		if bf, ok := f.(*netlink.BpfFilter); ok {
			if id != 0 {
				return 0, fmt.Errorf("tap0: more than one BPF filter")
			}
			id = bf.Id
		}
	}
	return id, nil
}

// attach puts a filter of the benchmark's own on tap0, loaded with the
// policy the daemon gave the sandbox (its text and the gateway's allow):
// the same program, the same rules.
func (b *netBox) attach() (*netpolicy.Filter, error) {
	text, err := b.d.c.ReadFile("sandboxes/" + b.id + "/net/policy")
	if err != nil {
		return nil, err
	}
	p, err := netpolicy.Parse(append(text, []byte("allow "+sbnet.GatewayAddr.Addr().String()+"\n")...))
	if err != nil {
		return nil, err
	}
	f, err := netpolicy.Load()
	if err != nil {
		return nil, err
	}
	if err := f.Set(p); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Take(b.h, b.tap); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// detach removes the program from tap0: f's if given, else the
// daemon's (its clsact qdisc, which takes the filter with it).
func (b *netBox) detach(f *netpolicy.Filter) error {
	if f != nil {
		return f.Close()
	}
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: b.tap, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
	if err := b.h.QdiscDel(q); err != nil {
		return fmt.Errorf("detach the daemon's filter: %w", err)
	}
	return nil
}

// netFlow runs the guest's bulk send and connection run once, after
// checking tap0 has a program (filtered) or none.
func (r *run) netFlow(ctx context.Context, b *netBox, o netOpts, label string, filtered bool) (flowFig, error) {
	id, err := b.programID()
	if err != nil {
		return flowFig{}, err
	}
	if filtered != (id != 0) {
		return flowFig{}, fmt.Errorf("%s: tap0's program id is %d", label, id)
	}
	var fig flowFig
	var out bytes.Buffer
	cmd := fmt.Sprintf("python3 /root/netflow.py tput %s %d %d && python3 /root/netflow.py conn %s %d %d",
		srvAddr, sinkPort, o.mib, srvAddr, connPort, o.conns)
	if err := b.sh(ctx, cmd, &out); err != nil {
		return fig, fmt.Errorf("%s: %w", label, err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "R" {
			continue
		}
		secs, _ := strconv.ParseFloat(f[2], 64)
		n, _ := strconv.ParseInt(f[3], 10, 64)
		switch f[1] {
		case "tput":
			fig.tputSecs, fig.bytes = secs, n
		case "conn":
			fig.connSecs, fig.conns = secs, int(n)
		}
	}
	if fig.tputSecs <= 0 || fig.connSecs <= 0 || fig.bytes != int64(o.mib)<<20 || fig.conns != o.conns {
		return fig, fmt.Errorf("%s: guest said %q (the server must get %d bytes)", label, out.String(), int64(o.mib)<<20)
	}
	r.progress("  %s: %.2f MiB/s, %.1f connections/s", label, fig.mibps(), fig.cps())
	return fig, nil
}
