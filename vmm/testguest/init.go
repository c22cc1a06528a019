package testguest

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mode is the kernel command-line variable (passed to init as an
// environment variable) that selects what Init does.
const Mode = "sandfs_guest"

// Marker begins the first line Init prints; the benchmark's busybox init
// (vmm/bench) prints it too.
const Marker = "SANDFS-GUEST-INIT"

// Init is a minimal PID 1 for test and benchmark guests, run when the
// host's own binary is the guest's /init. It prints
//
//	SANDFS-GUEST-INIT cpus=<n> uptime=<s>
//
// then, by $sandfs_guest:
//
//	ticks    "tick <n>" every 100 ms of guest time, forever
//	reboot   reboot at once (the VMM sees an i8042 reset and exits)
//	forever  sleep (default)
func Init() {
	unix.Mount("proc", "/proc", "proc", 0, "")
	cpus := 0
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "processor") {
				cpus++
			}
		}
		f.Close()
	}
	up, _ := os.ReadFile("/proc/uptime")
	fmt.Printf("%s cpus=%d uptime=%s\n", Marker, cpus, strings.Fields(string(up) + " ?")[0])
	switch os.Getenv(Mode) {
	case "ticks":
		for i := 0; ; i++ {
			fmt.Printf("tick %d\n", i)
			time.Sleep(100 * time.Millisecond)
		}
	case "reboot":
		unix.Sync()
		unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	}
	for {
		time.Sleep(time.Hour)
	}
}
