package guest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
)

func TestAgentCtl(t *testing.T) {
	ts := newTestServer(t, Options{})
	var got []string
	ts.srv.sys = sysOps{
		setClock:    func(tm time.Time) error { got = append(got, "clock "+tm.UTC().Format(time.RFC3339Nano)); return nil },
		setHostname: func(h string) error { got = append(got, "hostname "+h); return nil },
		network: func(c Config) error {
			got = append(got, "net "+c.Iface+" "+func() string {
				if c.IP != nil {
					return c.IP.String()
				}
				return "-"
			}()+" "+c.GW.String()+" "+func() string {
				var s []string
				for _, d := range c.DNS {
					s = append(s, d.String())
				}
				return strings.Join(s, ",")
			}())
			return nil
		},
		workspace: func(port uint32) error { got = append(got, "workspace "+strconv.Itoa(int(port))); return nil },
		forget:    func() error { got = append(got, "forget"); return nil },
	}
	_, root := ts.dial()
	ctl := openFile(t, root, "ctl", p9.ReadWrite)
	for _, m := range []string{"time 1700000000000000001", "hostname box2", "net eth0 10.0.2.16/24 10.0.2.2", "dns 1.1.1.1 9.9.9.9", "workspace 565", "forget"} {
		mustWrite(t, ctl, m)
	}
	want := []string{"clock 2023-11-14T22:13:20.000000001Z", "hostname box2", "net eth0 10.0.2.16/24 10.0.2.2 ", "net  - <nil> 1.1.1.1,9.9.9.9", "workspace 565", "forget"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("applied %q, want %q", got, want)
	}
	if err := write(ctl, "forget now"); !errors.Is(err, linux.EINVAL) {
		t.Errorf("forget now: %v", err)
	}
	if err := write(ctl, "workspace 0"); !errors.Is(err, linux.EINVAL) {
		t.Errorf("workspace 0: %v", err)
	}
	if err := write(ctl, "time yesterday"); !errors.Is(err, linux.EINVAL) {
		t.Errorf("bad time: %v", err)
	}
	if e := readFile(t, root, "err"); e != "time: want unix nanoseconds, got \"yesterday\"\n" {
		t.Errorf("err = %q", e)
	}
	if s := readFile(t, root, "ctl"); !strings.HasPrefix(s, "boot=") || !strings.Contains(s, " now=") {
		t.Errorf("ctl read = %q", s)
	}
	d := openFile(t, root, "", p9.ReadOnly)
	ents, _ := d.Readdir(0, 4096)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if strings.Join(names, " ") != "ctl err fs procs watch" {
		t.Errorf("root = %v", names)
	}
}
