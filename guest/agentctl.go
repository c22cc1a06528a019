package guest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"

	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

// sysOps are the machine-wide changes the agent's ctl makes; tests
// replace them so they do not change the host.
type sysOps struct {
	setClock    func(time.Time) error
	setHostname func(string) error
	network     func(Config) error
}

func realSysOps(etcRoot string) sysOps {
	return sysOps{
		setClock:    func(t time.Time) error { return SetClock(Config{Time: t}) },
		setHostname: func(h string) error { return SetHostname(Config{Hostname: h}, etcRoot) },
		network:     func(c Config) error { return Network(c, etcRoot) },
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
			return wrapSys("time", s.sys.setClock(time.Unix(0, ns)))
		}},
	{Name: "hostname", Usage: "hostname NAME", Min: 1, Max: 1,
		Doc: "set the host name, /etc/hostname and /etc/hosts.",
		Run: func(s *Server, a []string) error {
			if !validHostname(a[0]) {
				return msg.Errorf(syscall.EINVAL, "hostname: bad name %s", msg.Cite(a[0]))
			}
			return wrapSys("hostname", s.sys.setHostname(a[0]))
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
			return wrapSys("net", s.sys.network(c))
		}},
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
			return wrapSys("dns", s.sys.network(c))
		}},
}

func wrapSys(verb string, err error) error {
	if err == nil {
		return nil
	}
	return msg.Errorf(msg.Errno(err), "%s: %v", verb, err)
}

// agentCtl parses and applies one message to the agent's /ctl.
func (s *Server) agentCtl(m []byte) error {
	c, err := agentVerbs.Parse(rules, m)
	if err == nil {
		err = c.Verb.Run(s, c.Args)
	}
	s.mu.Lock()
	if err != nil {
		s.errText = err.Error()
		s.opt.Logf("%v", err)
	}
	s.mu.Unlock()
	return err
}

// agentCtlFile serves /ctl: write one agentVerbs message; read
// "boot=<unix ns> now=<unix ns>" (when the agent started, the clock now).
// agentErrFile serves /err: the text of the last failed /ctl write.
type agentCtlFile struct {
	synth
	templatefs.NotDirectoryFile
	isErr bool

	mu   sync.Mutex // guards text
	text []byte
}

var _ p9.File = (*agentCtlFile)(nil)

const (
	qidAgentCtl = qidSynth | 4
	qidAgentErr = qidSynth | 5
)

func newAgentCtlFile(c *conn, isErr bool) *agentCtlFile {
	if isErr {
		return &agentCtlFile{synth: synth{c: c, qid: synthQID(p9.TypeRegular, qidAgentErr), mode: p9.ModeRegular | 0o444}, isErr: true}
	}
	return &agentCtlFile{synth: synth{c: c, qid: synthQID(p9.TypeRegular, qidAgentCtl), mode: p9.ModeRegular | 0o600}}
}

// Walk implements p9.File.Walk.
func (f *agentCtlFile) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		return nil, newAgentCtlFile(f.c, f.isErr), nil
	}
	return nil, nil, linux.ENOTDIR
}

// Open implements p9.File.Open.
func (f *agentCtlFile) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	if f.isErr && mode.Mode() != p9.ReadOnly {
		return f.qid, 0, linux.EACCES
	}
	return f.qid, 0, nil
}

// ReadAt implements p9.File.ReadAt.
func (f *agentCtlFile) ReadAt(b []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off == 0 || f.text == nil {
		if f.isErr {
			f.c.s.mu.Lock()
			f.text = []byte(f.c.s.errText)
			f.c.s.mu.Unlock()
			if len(f.text) > 0 {
				f.text = append(f.text, '\n')
			}
		} else {
			f.text = []byte(fmt.Sprintf("boot=%d now=%d\n", bootTime.UnixNano(), time.Now().UnixNano()))
		}
	}
	return readText(f.text, b, off), nil
}

// WriteAt implements p9.File.WriteAt.
func (f *agentCtlFile) WriteAt(b []byte, off int64) (int, error) {
	if f.isErr {
		return 0, linux.EACCES
	}
	if err := f.c.s.agentCtl(b); err != nil {
		return 0, errOut(err)
	}
	return len(b), nil
}
