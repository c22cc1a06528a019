package guest

import (
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
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
//	sandfs.debug=1             log every 9P request to the console
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

// DefaultPort is the vsock port the guest agent listens on (9P's IANA
// port, 564).
const DefaultPort = 564

// ParseCmdline parses the kernel command line. It returns the config and
// one error per bad sandfs.* word (the caller logs them; init goes on with
// the rest).
func ParseCmdline(cmdline string) (Config, []error) {
	c := Config{Iface: "eth0", Port: DefaultPort}
	var errs []error
	bad := func(w, why string) {
		errs = append(errs, msg.Errorf(syscall.EINVAL, "cmdline: %s %q", why, w))
	}
	for _, w := range strings.Fields(cmdline) {
		k, v, ok := strings.Cut(w, "=")
		if !strings.HasPrefix(k, "sandfs.") {
			continue
		}
		if !ok {
			bad(w, "missing value")
			continue
		}
		switch k {
		case "sandfs.ip":
			ip, n, err := net.ParseCIDR(v)
			if err != nil || ip.To4() == nil && ip.To16() == nil {
				bad(w, "bad address/prefix")
				continue
			}
			n.IP = ip
			c.IP = n
		case "sandfs.gw":
			ip := net.ParseIP(v)
			if ip == nil {
				bad(w, "bad gateway")
				continue
			}
			c.GW = ip
		case "sandfs.dns":
			c.DNS = nil
			for _, s := range strings.Split(v, ",") {
				ip := net.ParseIP(s)
				if ip == nil {
					bad(w, "bad name server")
					c.DNS = nil
					break
				}
				c.DNS = append(c.DNS, ip)
			}
		case "sandfs.hostname":
			if !validHostname(v) {
				bad(w, "bad host name")
				continue
			}
			c.Hostname = v
		case "sandfs.iface":
			if v == "" || len(v) > 15 || strings.ContainsAny(v, "/ ") {
				bad(w, "bad interface name")
				continue
			}
			c.Iface = v
		case "sandfs.mtu":
			n, err := strconv.Atoi(v)
			if err != nil || n < 68 || n > 65535 {
				bad(w, "bad mtu")
				continue
			}
			c.MTU = n
		case "sandfs.time":
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ns <= 0 {
				bad(w, "bad time (want unix nanoseconds)")
				continue
			}
			c.Time = time.Unix(0, ns)
		case "sandfs.port":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n == 0 {
				bad(w, "bad port")
				continue
			}
			c.Port = uint32(n)
		case "sandfs.debug":
			c.Debug = v != "0" && v != ""
		default:
			bad(w, "unknown key")
		}
	}
	return c, errs
}

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
