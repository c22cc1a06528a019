package guest

import (
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// Config is what sandfs-init reads from the kernel command line
// (/proc/cmdline). Every key is optional; unknown sandfs.* keys are
// reported and ignored, other words belong to the kernel and are skipped.
//
//	sandfs.ip=10.0.2.15/24     address and prefix of sandfs.iface
//	sandfs.gw=10.0.2.2         default route
//	sandfs.dns=1.1.1.1,8.8.8.8 name servers, written to /etc/resolv.conf
//	sandfs.hostname=box1       host name (also /etc/hostname, /etc/hosts)
//	sandfs.iface=eth0          interface for sandfs.ip (default eth0)
//	sandfs.mtu=1500            MTU of sandfs.iface (default: leave as is)
//	sandfs.time=<unix ns>      set the clock before anything else
//	sandfs.port=564            vsock port of the 9P server (default 564)
//	sandfs.debug=1             log the 9P server's debug messages (connections, interrupted reads)
type Config struct {
	IP       *net.IPNet // address with its prefix, nil: none
	GW       net.IP
	DNS      []net.IP
	Hostname string
	Iface    string
	MTU      int
	Time     time.Time // zero: leave the clock alone
	Port     uint32
	Debug    bool
}

// ParseCmdline parses the kernel command line. It returns the config and
// one error per bad sandfs.* word (the caller logs them; init goes on with
// the rest).
func ParseCmdline(cmdline string) (Config, []error) {
	c := Config{Iface: "eth0", Port: hybrid.AgentPort}
	var errs []error
	bad := func(w, why string) {
		errs = append(errs, msg.Errorf(syscall.EINVAL, "cmdline: %s %q", why, w))
	}
	for _, w := range strings.Fields(cmdline) {
		k, v, ok := strings.Cut(w, "=")
		if !strings.HasPrefix(k, "sandfs.") {
			continue
		}
		key, known := cmdlineKeys[k]
		switch {
		case !ok:
			bad(w, "missing value")
		case !known:
			bad(w, "unknown key")
		case !key.set(&c, v):
			bad(w, key.bad)
		}
	}
	return c, errs
}

// cmdlineKey is one sandfs.* key of the kernel command line: set takes
// its value into a Config and reports whether it was good (a bad value
// leaves the field as it was, but sandfs.dns, which it empties); bad is
// the reason ParseCmdline gives when it was not.
type cmdlineKey struct {
	bad string
	set func(c *Config, v string) bool
}

// cmdlineKeys are the keys ParseCmdline knows, in Config's order.
var cmdlineKeys = map[string]cmdlineKey{
	"sandfs.ip": {"bad address/prefix", func(c *Config, v string) bool {
		ip, n, err := net.ParseCIDR(v)
		if err != nil || ip.To4() == nil && ip.To16() == nil {
			return false
		}
		n.IP = ip
		c.IP = n
		return true
	}},
	"sandfs.gw": {"bad gateway", func(c *Config, v string) bool {
		ip := net.ParseIP(v)
		if ip == nil {
			return false
		}
		c.GW = ip
		return true
	}},
	"sandfs.dns": {"bad name server", func(c *Config, v string) bool {
		c.DNS = nil
		for _, s := range strings.Split(v, ",") {
			ip := net.ParseIP(s)
			if ip == nil {
				c.DNS = nil
				return false
			}
			c.DNS = append(c.DNS, ip)
		}
		return true
	}},
	"sandfs.hostname": {"bad host name", func(c *Config, v string) bool {
		if !validHostname(v) {
			return false
		}
		c.Hostname = v
		return true
	}},
	"sandfs.iface": {"bad interface name", func(c *Config, v string) bool {
		if v == "" || len(v) > 15 || strings.ContainsAny(v, "/ ") {
			return false
		}
		c.Iface = v
		return true
	}},
	"sandfs.mtu": {"bad mtu", func(c *Config, v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n < 68 || n > 65535 {
			return false
		}
		c.MTU = n
		return true
	}},
	"sandfs.time": {"bad time (want unix nanoseconds)", func(c *Config, v string) bool {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ns <= 0 {
			return false
		}
		c.Time = time.Unix(0, ns)
		return true
	}},
	"sandfs.port": {"bad port", func(c *Config, v string) bool {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return false
		}
		c.Port = uint32(n)
		return true
	}},
	"sandfs.debug": {"", func(c *Config, v string) bool {
		c.Debug = v != "0" && v != ""
		return true
	}},
}

// validHostname reports whether s is a host name sandfs accepts: letters,
// digits, '-' and '.', at most 64 bytes, not starting with '-' or '.'.
func validHostname(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
		default:
			return false
		}
	}
	return s[0] != '-' && s[0] != '.'
}
