package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// memUse is a VMM process's memory, in KiB, from /proc/PID/smaps_rollup
// (PSS) and /proc/PID/smaps (the guest RAM mappings).
type memUse struct {
	pss       int64 // the whole process
	guestPSS  int64 // the guest RAM mappings (page cache of the snapshot shared with every sandbox of it, and private copies)
	guestAnon int64 // the guest's private pages: copy-on-write copies of the snapshot's pages and new ones
	uss       int64 // private pages beyond the guest mappings, plus guestAnon: what one more sandbox adds
	binPSS    int64 // the VMM's executable's mappings
	anonPSS   int64 // mappings without a path (Go heap, stacks)
}

// beyond is the process's PSS without its guest RAM mappings, plus the
// guest's private pages: what one more idle sandbox costs the host when
// the snapshot's page cache is shared.
func (m memUse) beyond() int64 { return m.pss - m.guestPSS + m.guestAnon }

// mapping is one entry of a smaps file: its path (may be empty) and its
// fields in KiB.
type mapping struct {
	path   string
	fields map[string]int64
}

// parseSmaps reads smaps or smaps_rollup text: a header line per mapping
// ("lo-hi perms offset dev inode [path]"), then "Key: value kB" lines.
func parseSmaps(r io.Reader) ([]mapping, error) {
	var ms []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if strings.HasSuffix(f[0], ":") {
			if len(ms) == 0 {
				return nil, fmt.Errorf("smaps: field %q before any mapping", f[0])
			}
			if len(f) == 3 && f[2] == "kB" {
				v, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("smaps: %q: %v", sc.Text(), err)
				}
				ms[len(ms)-1].fields[strings.TrimSuffix(f[0], ":")] = v
			}
			continue
		}
		if len(f) < 5 || !strings.Contains(f[0], "-") {
			return nil, fmt.Errorf("smaps: bad mapping line %q", sc.Text())
		}
		m := mapping{fields: map[string]int64{}}
		if len(f) >= 6 {
			m.path = strings.Join(f[5:], " ")
		}
		ms = append(ms, m)
	}
	return ms, sc.Err()
}

// readMemUse reads pid's smaps_rollup and smaps; guest mappings are those
// of the file guestFile (the restored snapshot's mem).
func readMemUse(pid int, guestFile string) (memUse, error) {
	var m memUse
	read := func(name string) ([]mapping, error) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return parseSmaps(f)
	}
	roll, err := read("smaps_rollup")
	if err != nil {
		return m, err
	}
	if len(roll) != 1 {
		return m, fmt.Errorf("smaps_rollup: %d entries", len(roll))
	}
	m.pss = roll[0].fields["Pss"]
	all, err := read("smaps")
	if err != nil {
		return m, err
	}
	m.guestPSS, m.guestAnon = guestUse(all, guestFile)
	priv := func(x mapping) int64 { return x.fields["Private_Clean"] + x.fields["Private_Dirty"] }
	m.uss = priv(roll[0]) + m.guestAnon
	for _, x := range all {
		if x.path == guestFile {
			m.uss -= priv(x)
		}
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	m.binPSS, m.anonPSS = splitUse(all, exe)
	return m, nil
}

// guestUse sums PSS and anonymous (private copy) KiB over the mappings of
// file.
func guestUse(ms []mapping, file string) (pss, anon int64) {
	for _, x := range ms {
		if x.path == file {
			pss += x.fields["Pss"]
			anon += x.fields["Anonymous"]
		}
	}
	return pss, anon
}

// splitUse sums the PSS KiB of the mappings of file exe and of the
// mappings without a path (anonymous memory).
func splitUse(ms []mapping, exe string) (bin, anon int64) {
	for _, x := range ms {
		switch x.path {
		case exe:
			bin += x.fields["Pss"]
		case "":
			anon += x.fields["Pss"]
		}
	}
	return bin, anon
}
