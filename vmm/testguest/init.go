package testguest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/fnv"
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
//	dirty    a DirtyBufMiB buffer driven from the console (dirty below)
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
	case "dirty":
		dirty()
	}
	for {
		time.Sleep(time.Hour)
	}
}

// DirtyBufMiB is the size of the "dirty" mode's buffer.
const DirtyBufMiB = 64

// dirty maps a DirtyBufMiB buffer, prints "DIRTY-READY", then serves
// commands read from the console, one per line:
//
//	fill <from> <n> <seed>  write pages [from, from+n) MiB of the buffer
//	                        (first and last word of each page: seed and
//	                        the page index), then print "FILLED <seed>"
//	sum                     print "SUM <hash>" of those words over the
//	                        whole buffer
//
// Snapshot tests use it to dirty a known amount of guest memory and to
// check memory contents after a restore.
func dirty() {
	buf, err := unix.Mmap(-1, 0, DirtyBufMiB<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Printf("DIRTY-FAILED %v\n", err)
		return
	}
	fmt.Println("DIRTY-READY")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var from, n, seed uint64
		switch f := strings.Fields(sc.Text()); {
		case len(f) == 4 && f[0] == "fill":
			fmt.Sscan(f[1]+" "+f[2]+" "+f[3], &from, &n, &seed)
			for p := from << 8; p < min((from+n)<<8, DirtyBufMiB<<8); p++ {
				pg := buf[p<<12 : (p+1)<<12]
				binary.LittleEndian.PutUint64(pg, seed)
				binary.LittleEndian.PutUint64(pg[4096-8:], p)
			}
			fmt.Printf("FILLED %d\n", seed)
		case len(f) == 1 && f[0] == "sum":
			h := fnv.New64a()
			for p := 0; p < DirtyBufMiB<<8; p++ {
				h.Write(buf[p<<12 : p<<12+8])
				h.Write(buf[(p+1)<<12-8 : (p+1)<<12])
			}
			fmt.Printf("SUM %x\n", h.Sum64())
		}
	}
}
