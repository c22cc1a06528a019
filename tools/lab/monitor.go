package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"
)

// The lab's QEMU listens with its human monitor on a unix socket in the
// lab's run directory. A lab ended for its time (a timeout, or a caller
// that saw it print nothing for too long) is first asked where each
// emulated CPU stands: its registers and its local APIC. Lab runs of
// `sandfs bench worlds` stopped with the whole lab idle (QEMU at 0 %
// CPU) and nothing inside it answering, which no watchdog inside the lab
// can record; the CPUs' RIPs (halted or not, resolved with the kernel
// build's System.map) and their APICs' pending and in-service
// interrupts are what tells a lab kernel waiting for an interrupt that
// never came from one spinning. docs/lab.md "When the lab stops".

// monitorSocket is the monitor's socket in run directory run.
func monitorSocket(run string) string { return run + "/monitor.sock" }

// monitorWait bounds the whole exchange with the monitor.
const monitorWait = 5 * time.Second

// cpuDump asks the monitor on sock for `info registers -a` and each of
// cpus CPUs' `info lapic`, and returns what it answered, or why not.
func cpuDump(sock string, cpus int) string {
	c, err := net.DialTimeout("unix", sock, monitorWait)
	if err != nil {
		return fmt.Sprintf("(no monitor: %v)\n", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(monitorWait))
	r := bufio.NewReader(c)
	if _, err := readPrompt(r); err != nil {
		return fmt.Sprintf("(monitor: %v)\n", err)
	}
	cmds := []string{"info registers -a"}
	for i := range cpus {
		cmds = append(cmds, fmt.Sprintf("cpu %d", i), "info lapic")
	}
	var b strings.Builder
	for _, cmd := range cmds {
		if _, err := fmt.Fprintf(c, "%s\n", cmd); err != nil {
			fmt.Fprintf(&b, "(monitor: %v)\n", err)
			break
		}
		out, err := readPrompt(r)
		fmt.Fprintf(&b, "(qemu) %s\n%s", cmd, monitorText(out))
		if err != nil {
			fmt.Fprintf(&b, "(monitor: %v)\n", err)
			break
		}
	}
	return b.String()
}

// readPrompt reads the monitor's output up to its next "(qemu) " prompt.
func readPrompt(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			return string(b), err
		}
		b = append(b, c)
		if bytes.HasSuffix(b, []byte("(qemu) ")) {
			return string(b[:len(b)-len("(qemu) ")]), nil
		}
	}
}

var escapes = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// monitorText is a command's output without the monitor's terminal
// escapes, carriage returns and its first line: the echo of the command
// as its line editor redrew it at each key ("iininfinfo…").
func monitorText(out string) string {
	out = strings.ReplaceAll(escapes.ReplaceAllString(out, ""), "\r", "")
	if _, rest, ok := strings.Cut(out, "\n"); ok {
		out = rest
	}
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out
}

var cpuRIP = regexp.MustCompile(`(?m)^CPU#(\d+)$|RIP=([0-9a-f]+) .*HLT=(\d)`)

// cpuSummary is one line per CPU of a dump: its RIP and whether it was
// halted.
func cpuSummary(dump string) string {
	var parts []string
	cpu := "?"
	for _, m := range cpuRIP.FindAllStringSubmatch(dump, -1) {
		if m[1] != "" {
			cpu = m[1]
			continue
		}
		parts = append(parts, fmt.Sprintf("CPU %s RIP=%s HLT=%s", cpu, m[2], m[3]))
	}
	if len(parts) == 0 {
		return "no registers"
	}
	return strings.Join(parts, "; ")
}
