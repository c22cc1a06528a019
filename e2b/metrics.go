package e2b

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/fs/client"
)

// sandboxMetric is E2B's SandboxMetric: one sample of a sandbox.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// maxProcFile bounds a read of a guest's /proc file: the guest is
// hostile, its agent may serve anything there.
const maxProcFile = 64 << 10

// cpuSample is a guest's /proc/stat cpu line: busy and total jiffies.
type cpuSample struct{ busy, total uint64 }

// cpuSamples is each sandbox's last sample, so that a sample's cpuUsedPct
// is over the time since the previous getMetrics (since boot the first
// time), as envd's is over its own interval.
type cpuSamples struct {
	mu   sync.Mutex // guards last
	last map[string]cpuSample
}

// swap records s as sandbox id's last sample and returns the one before.
func (c *cpuSamples) swap(id string, s cpuSample) (cpuSample, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]cpuSample{}
	}
	prev, ok := c.last[id]
	c.last[id] = s
	return prev, ok
}

func (c *cpuSamples) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.last, id)
}

// metrics is GET /sandboxes/{id}/metrics: one sample of the running
// guest, from its own /proc (sandboxes/<id>/fs/proc/stat and meminfo)
// and its status's cpus; a paused sandbox has none (an empty list).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	id := cl.rec.ID
	st, err := readStatus(cl.c, id)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			s.cpu.drop(id)
		}
		s.treeError(w, err)
		return
	}
	if st.State != "running" {
		writeJSON(w, http.StatusOK, []sandboxMetric{})
		return
	}
	m := sandboxMetric{CPUCount: st.CPUs}
	mem, err := readProc(cl.c, fsPath(id, "/proc/meminfo"))
	if err == nil {
		m.MemTotal, m.MemUsed, m.MemCache, err = parseMeminfo(mem)
	}
	var cpu cpuSample
	if err == nil {
		var b []byte
		if b, err = readProc(cl.c, fsPath(id, "/proc/stat")); err == nil {
			cpu, err = parseCPU(b)
		}
	}
	if err != nil {
		s.treeError(w, err)
		return
	}
	prev, _ := s.cpu.swap(id, cpu)
	m.CPUUsedPct = cpuPct(prev, cpu)
	m.Timestamp = time.Now().UTC()
	m.TimestampUnix = m.Timestamp.Unix()
	writeJSON(w, http.StatusOK, []sandboxMetric{m})
}

// readProc reads a guest /proc file of at most maxProcFile bytes.
func readProc(c *client.Client, path string) ([]byte, error) {
	f, err := c.Open(path, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProcFile+1))
	if err == nil && len(b) > maxProcFile {
		err = msg.Errorf(syscall.E2BIG, "metrics: %s over %d bytes", path, maxProcFile)
	}
	return b, err
}

// parseMeminfo reads /proc/meminfo (proc(5)): total, used (total less
// available) and page cache, in bytes.
func parseMeminfo(b []byte) (total, used, cache int64, err error) {
	kb := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n >= 0 && n < 1<<40 {
			kb[strings.TrimSuffix(f[0], ":")] = n
		}
	}
	total, avail := kb["MemTotal"], kb["MemAvailable"]
	if total == 0 || avail > total {
		return 0, 0, 0, msg.Errorf(syscall.EIO, "metrics: the guest's /proc/meminfo has no MemTotal and MemAvailable")
	}
	return total << 10, (total - avail) << 10, min(kb["Cached"], total) << 10, nil
}

// parseCPU reads the first line of /proc/stat (proc(5)): "cpu user nice
// system idle iowait irq softirq steal ...", in jiffies; idle and iowait
// are not busy.
func parseCPU(b []byte) (cpuSample, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuSample{}, msg.Errorf(syscall.EIO, "metrics: the guest's /proc/stat has no cpu line")
	}
	var s cpuSample
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > 1<<56 {
			return cpuSample{}, msg.Errorf(syscall.EIO, "metrics: the guest's /proc/stat: bad field %q", v)
		}
		s.total += n
		if i != 3 && i != 4 {
			s.busy += n
		}
	}
	return s, nil
}

// cpuPct is the busy share of the time from prev to cur, in percent (of
// all the guest's CPUs); since boot when prev is none or later than cur.
func cpuPct(prev, cur cpuSample) float64 {
	if prev.total >= cur.total || prev.busy > cur.busy {
		prev = cpuSample{}
	}
	if cur.total == prev.total {
		return 0
	}
	pct := 100 * float64(cur.busy-prev.busy) / float64(cur.total-prev.total)
	return math.Round(min(pct, 100)*10) / 10
}
