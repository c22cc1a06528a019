package lab

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"time"

	"sandfs/tools/tsc"
)

var (
	tscOnce sync.Once
	tscKHz  int
	tscSrc  string
	tscErr  error
)

var tscRe = regexp.MustCompile(`tsc: (?:Refined TSC clocksource calibration: |Detected )([0-9]+)\.([0-9]{3}) MHz`)

// HostTSCkHz returns the host TSC frequency in kHz and where it came from.
// The lab kernel gets it as tsc_early_khz=: TCG's RDTSC follows the host
// TSC, and without it PIT calibration under TCG fails now and then, which
// leaves tsc_khz=0 and nested KVM livelocked (kernel-and-lab-notes.md §6).
// Source order: $SANDFS_TSC_KHZ, the kernel log ("Refined ..." wins over
// "Detected ..."), then a 200 ms RDTSC measurement against CLOCK_MONOTONIC.
func HostTSCkHz() (int, string, error) {
	tscOnce.Do(func() { tscKHz, tscSrc, tscErr = hostTSCkHz() })
	return tscKHz, tscSrc, tscErr
}

func hostTSCkHz() (int, string, error) {
	if v := os.Getenv("SANDFS_TSC_KHZ"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, "", fmt.Errorf("lab: bad SANDFS_TSC_KHZ %q", v)
		}
		return n, "SANDFS_TSC_KHZ", nil
	}
	if out, err := exec.Command("dmesg").Output(); err == nil {
		if m := tscRe.FindAllSubmatch(out, -1); len(m) > 0 {
			last := m[len(m)-1]
			for _, x := range m { // prefer the refined calibration
				if string(x[0][5:12]) == "Refined" {
					last = x
				}
			}
			mhz, _ := strconv.Atoi(string(last[1]))
			frac, _ := strconv.Atoi(string(last[2]))
			return mhz*1000 + frac, "kernel log", nil
		}
	}
	k := measureTSC(200 * time.Millisecond)
	if k < 100_000 || k > 10_000_000 {
		return 0, "", fmt.Errorf("lab: measured TSC frequency %d kHz is implausible; set SANDFS_TSC_KHZ", k)
	}
	return k, "measured", nil
}

func measureTSC(d time.Duration) int {
	t0, c0 := time.Now(), tsc.Read()
	time.Sleep(d)
	t1, c1 := time.Now(), tsc.Read()
	return int(math.Round(float64(c1-c0) / float64(t1.Sub(t0).Nanoseconds()) * 1e6))
}
