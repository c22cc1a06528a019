package e2b

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	sfs "sandfs/fs"
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

// metrics is GET /sandboxes/{id}/metrics?start=S&end=E: the samples
// the adapter has of the sandbox (samples.go) within [S, E], after
// taking a new one when it is running: from the guest's own /proc
// (sandboxes/<id>/fs/proc/stat and meminfo), statfs of its root
// (sandboxes/<id>/fs, the agent's answer) and its status's cpus.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	start, end, ok := metricsRange(r.URL.Query())
	if !ok {
		writeError(w, http.StatusBadRequest, "metrics: start and end are unix seconds, start not after end")
		return
	}
	id := cl.rec.ID
	st, err := readStatus(cl.c, id)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			s.samples.drop(id)
		}
		s.treeError(w, err)
		return
	}
	if st.State == "running" {
		if err := s.sample(cl.c, id, st.CPUs); err != nil {
			s.treeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.samples.between(id, start, end))
}

// sample takes one sample of running sandbox id and adds it to its
// history.
func (s *Server) sample(c *client.Client, id string, cpus int) error {
	m := sandboxMetric{CPUCount: cpus}
	mem, err := c.ReadFileMax(fsPath(id, "/proc/meminfo"), maxProcFile)
	if err != nil {
		return err
	}
	if m.MemTotal, m.MemUsed, m.MemCache, err = parseMeminfo(mem); err != nil {
		return err
	}
	b, err := c.ReadFileMax(fsPath(id, "/proc/stat"), maxProcFile)
	if err != nil {
		return err
	}
	cpu, err := parseCPU(b)
	if err != nil {
		return err
	}
	fst, err := c.StatFS("sandboxes/" + id + "/fs")
	if err != nil {
		return err
	}
	if m.DiskTotal, m.DiskUsed, err = diskFigures(fst); err != nil {
		return err
	}
	m.Timestamp = time.Now().UTC()
	m.TimestampUnix = unixSec(m.Timestamp)
	s.samples.add(id, m, cpu) // sets CPUUsedPct
	return nil
}

// diskFigures are the guest root's size and use in bytes, as df(1)
// counts them (used: blocks less free ones), from its agent's statfs,
// which is the guest's to say: checked, EIO when impossible.
func diskFigures(st sfs.FSStat) (total, used int64, err error) {
	if st.BlockSize < 512 || st.BlockSize > 1<<20 || st.Blocks > 1<<40 || st.BlocksFree > st.Blocks {
		return 0, 0, msg.Errorf(syscall.EIO, "metrics: the guest's statfs is impossible (bsize %d, blocks %d, free %d)",
			st.BlockSize, st.Blocks, st.BlocksFree)
	}
	bs := int64(st.BlockSize)
	return int64(st.Blocks) * bs, int64(st.Blocks-st.BlocksFree) * bs, nil
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
