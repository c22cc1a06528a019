package guest

import (
	"bytes"
	"context"
	"fmt"
	iofs "io/fs"
	"net"
	"strconv"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	sfs "sandfs/fs"
)

// sysOps are the machine-wide changes the agent's ctl makes; tests
// replace them so they do not change the host.
type sysOps struct {
	setClock    func(time.Time) error
	setHostname func(string) error
	network     func(Config) error
	addEntropy  func([]byte) error
	workspace   func(port uint32) error
	forget      func() error
}

func realSysOps(etcRoot string) sysOps {
	return sysOps{
		setClock:    func(t time.Time) error { return SetClock(Config{Time: t}) },
		setHostname: func(h string) error { return SetHostname(Config{Hostname: h}, etcRoot) },
		network:     func(c Config) error { return Network(c, etcRoot) },
		addEntropy:  AddEntropy,
		workspace:   MountWorkspace,
		forget:      ForgetWorkspace,
	}
}

// agentVerb is the handler of an agent verb: it applies the arguments.
type agentVerb func(s *Server, a []string) error

// agentVerbs is the grammar of the agent's /ctl: machine-wide settings
// the host changes after boot, above all after a snapshot is restored or
// cloned (the clock has stood still; a clone needs its own address).
var agentVerbs = msg.Table[agentVerb, msg.Stateless]{
	{Name: "time", Usage: "time UNIXNS", Min: 1, Max: 1,
		Doc: "set the clock (settimeofday) to UNIXNS nanoseconds since 1970.",
		Run: func(s *Server, a []string) error {
			ns, err := strconv.ParseInt(a[0], 10, 64)
			if err != nil || ns <= 0 {
				return msg.Errorf(syscall.EINVAL, "time: want unix nanoseconds, got %s", msg.Cite(a[0]))
			}
			return s.sys.setClock(time.Unix(0, ns))
		}},
	{Name: "hostname", Usage: "hostname NAME", Min: 1, Max: 1,
		Doc: "set the host name, /etc/hostname and /etc/hosts.",
		Run: func(s *Server, a []string) error {
			if !validHostname(a[0]) {
				return msg.Errorf(syscall.EINVAL, "hostname: bad name %s", msg.Cite(a[0]))
			}
			return s.sys.setHostname(a[0])
		}},
	{Name: "net", Usage: "net IFACE ADDR/PREFIX [GW]", Min: 2, Max: 3,
		Doc: "give IFACE this address (replacing the same one), bring it up, set the default route via GW.",
		Run: func(s *Server, a []string) error {
			ip, n, err := net.ParseCIDR(a[1])
			if err != nil {
				return msg.Errorf(syscall.EINVAL, "net: bad address %s", msg.Cite(a[1]))
			}
			n.IP = ip
			c := Config{Iface: a[0], IP: n}
			if len(a) == 3 {
				if c.GW = net.ParseIP(a[2]); c.GW == nil {
					return msg.Errorf(syscall.EINVAL, "net: bad gateway %s", msg.Cite(a[2]))
				}
			}
			return s.sys.network(c)
		}},
	{Name: "entropy", Usage: "entropy HEX", Min: 1, Max: 1,
		Doc: "feed 32..256 bytes (hex) to the kernel's RNG, credited, and reseed its CRNG.",
		Run: func(s *Server, a []string) error {
			b, err := parseEntropy(a[0])
			if err != nil {
				return err
			}
			return s.sys.addEntropy(b)
		}},
	{Name: "workspace", Usage: "workspace PORT", Min: 1, Max: 1,
		Doc: "mount the sandbox's world at /workspace: over the VMM's virtio-9p device (tag sandfs-world) if there is one and it is free, else served by the host on vsock PORT (9p, trans=fd).",
		Run: func(s *Server, a []string) error {
			port, err := strconv.ParseUint(a[0], 10, 32)
			if err != nil || port == 0 {
				return msg.Errorf(syscall.EINVAL, "workspace: bad port %s", msg.Cite(a[0]))
			}
			return s.sys.workspace(uint32(port))
		}},
	{Name: "forget", Usage: "forget", Min: 0, Max: 0,
		Doc: "drop what the guest has cached of /workspace (names, attributes, pages; not those of files in use): the world changed under it.",
		Run: func(s *Server, a []string) error { return s.sys.forget() }},
	{Name: "dns", Usage: "dns IP...", Min: 1, Max: 8,
		Doc: "write /etc/resolv.conf with these name servers.",
		Run: func(s *Server, a []string) error {
			var c Config
			for _, x := range a {
				ip := net.ParseIP(x)
				if ip == nil {
					return msg.Errorf(syscall.EINVAL, "dns: bad address %s", msg.Cite(x))
				}
				c.DNS = append(c.DNS, ip)
			}
			return s.sys.network(c)
		}},
}

// agentCtl parses and applies one message to the agent's /ctl.
func (s *Server) agentCtl(m []byte) error {
	c, err := agentVerbs.Parse(rules, m)
	if err == nil {
		err = msg.Prefix(c.Verb.Name, c.Verb.Run(s, c.Args))
	}
	s.noteCtlErr(err)
	return err
}

// noteCtlErr makes a failed /ctl message's error what /err serves, and
// logs it.
func (s *Server) noteCtlErr(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	s.errText = err.Error()
	s.opt.Logf("%v", err)
	s.mu.Unlock()
}

// agentCtlFile serves /ctl: write one agentVerbs message; read, e.g.
//
//	boot=1764585600000000000 now=1764585612345678901
//
// (when the agent started, and the clock now, in unix nanoseconds).
type agentCtlFile struct {
	s    *Server
	mode iofs.FileMode
}

var (
	_ sfs.Source = (*agentCtlFile)(nil)
	_ sfs.Sink   = (*agentCtlFile)(nil)
)

// Stat implements sfs.Node.Stat.
func (f *agentCtlFile) Stat(context.Context) (sfs.Attr, error) { return synthAttr(f.mode), nil }

// Text implements sfs.Source.
func (f *agentCtlFile) Text(_ context.Context, b *bytes.Buffer) error {
	fmt.Fprintf(b, "boot=%d now=%d\n", bootTime.UnixNano(), time.Now().UnixNano())
	return nil
}

// Message implements sfs.Sink.
func (f *agentCtlFile) Message(_ context.Context, m []byte) error { return f.s.agentCtl(m) }

// agentErrFile serves /err: the text of the last failed /ctl write, e.g.
//
//	hostname: bad name "-x"
type agentErrFile struct {
	s    *Server
	mode iofs.FileMode
}

var _ sfs.Source = (*agentErrFile)(nil)

// Stat implements sfs.Node.Stat.
func (f *agentErrFile) Stat(context.Context) (sfs.Attr, error) { return synthAttr(f.mode), nil }

// Text implements sfs.Source.
func (f *agentErrFile) Text(_ context.Context, b *bytes.Buffer) error {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if f.s.errText != "" {
		b.WriteString(f.s.errText + "\n")
	}
	return nil
}
