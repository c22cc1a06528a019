package labtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
	"sandfs/vmm"
	"sandfs/vmm/bus"
	"sandfs/vmm/testguest"
	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/blk"
	vnet "sandfs/vmm/virtio/net"
	"sandfs/vmm/virtio/rng"
	"sandfs/vmm/virtio/vsock"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// rig is one machine with the four devices, registered in a fixed order
// with save/restore hooks, as vmm.addDevices does.
type rig struct {
	m      *vmm.Machine
	con    *console
	disk   *blk.COW
	closes []func() error
}

func hooks[S any](tr *virtio.Transport, save func() S, restore func(S) error) vmm.Hooks {
	return vmm.Hooks{
		Pause:  tr.Pause,
		Resume: tr.Resume,
		Save:   func() (any, error) { return save(), nil },
		Restore: func(b []byte) error {
			var s S
			if err := json.Unmarshal(b, &s); err != nil {
				return err
			}
			return restore(s)
		},
	}
}

func newRig(t *testing.T, kernel, initrd []byte, cmdline, memFile, base, overlay string, tap *os.File, uds string) *rig {
	t.Helper()
	r := &rig{con: &console{}}
	var err error
	r.m, err = vmm.NewMachine(vmm.MachineConfig{MemBytes: 256 << 20, CPUs: 1, Kernel: kernel, Initrd: initrd,
		Cmdline: cmdline, Console: r.con, MemFile: memFile})
	if err != nil {
		t.Fatal(err)
	}
	add := func(name string, mk func(s vmm.VirtioSlot) (*virtio.Transport, vmm.Hooks, func() error, error)) {
		var h vmm.Hooks
		if _, err := r.m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
			tr, hk, cl, err := mk(s)
			if err != nil {
				return nil, err
			}
			h = hk
			r.closes = append(r.closes, cl)
			return tr, nil
		}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := r.m.AddHooks(name, h); err != nil {
			t.Fatal(err)
		}
	}
	if r.disk, err = blk.OpenCOW(base, overlay, blk.COWOptions{}); err != nil {
		t.Fatal(err)
	}
	m := r.m
	add("blk0", func(s vmm.VirtioSlot) (*virtio.Transport, vmm.Hooks, func() error, error) {
		d, err := blk.New(m.Memory(), m.IRQ(), s.IRQ, r.disk, blk.Config{ID: "restore"})
		if err != nil {
			return nil, vmm.Hooks{}, nil, err
		}
		return d.Transport(), hooks(d.Transport(), d.Save, d.Restore), d.Close, nil
	})
	add("net0", func(s vmm.VirtioSlot) (*virtio.Transport, vmm.Hooks, func() error, error) {
		d := vnet.New(m.Memory(), m.IRQ(), s.IRQ, tap, vnet.Config{})
		return d.Transport(), hooks(d.Transport(), d.Save, d.Restore), d.Close, nil
	})
	add("vsock0", func(s vmm.VirtioSlot) (*virtio.Transport, vmm.Hooks, func() error, error) {
		d, err := vsock.New(m.Memory(), m.IRQ(), s.IRQ, vsock.Config{UDS: uds})
		if err != nil {
			return nil, vmm.Hooks{}, nil, err
		}
		return d.Transport(), hooks(d.Transport(), d.Save, d.Restore), d.Close, nil
	})
	add("rng0", func(s vmm.VirtioSlot) (*virtio.Transport, vmm.Hooks, func() error, error) {
		d := rng.New(m.Memory(), m.IRQ(), s.IRQ)
		return d.Transport(), hooks(d.Transport(), d.Save, d.Restore), d.Close, nil
	})
	return r
}

// shutdown closes the devices (so their goroutines are gone while guest
// RAM is still mapped), then the machine, then the disk.
func (r *rig) shutdown(t *testing.T) {
	for _, c := range r.closes {
		c()
	}
	r.m.Close()
	if err := r.disk.Close(); err != nil {
		t.Errorf("close disk: %v", err)
	}
}

// guestCmd runs one guestServe command over a host-initiated vsock
// connection to m's guest and returns the reply. A command that fails
// reports where m's vCPUs stand (StallReport: run-tests.sh tells the
// lab's nested-SVM stall by it).
func guestCmd(t *testing.T, m *vmm.Machine, uds, line string, body []byte) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	dctx, cancel := context.WithDeadline(context.Background(), deadline)
	c, err := hybrid.Dial(dctx, uds, guestListenPort)
	cancel()
	if err != nil {
		t.Fatalf("%s: %v; vCPUs:\n%s", line, err, m.StallReport())
	}
	defer c.Close()
	c.SetDeadline(deadline)
	fmt.Fprintf(c, "%s\n", line)
	go func() {
		c.Write(body)
		c.(*net.UnixConn).CloseWrite()
	}()
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s: read reply: %v (after %d bytes); vCPUs:\n%s", line, err, len(out), m.StallReport())
	}
	return string(out)
}

// frameWatch records the payloads of frames arriving on a host interface.
type frameWatch struct {
	mu  sync.Mutex
	got [][]byte
}

func watchFrames(t *testing.T, ifindex int, stop <-chan struct{}) *frameWatch {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(etherTypeOut)))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(etherTypeOut), Ifindex: ifindex}); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	w := &frameWatch{}
	go func() {
		defer unix.Close(fd)
		b := make([]byte, 2048)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, b, 0)
			if err == nil {
				w.mu.Lock()
				w.got = append(w.got, bytes.Clone(b[:n]))
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *frameWatch) saw(marker string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.got {
		if bytes.Contains(f, []byte(marker)) {
			return true
		}
	}
	return false
}

// TestSaveRestore runs a guest using all four devices, snapshots it
// (pause, save, close), restores the snapshot into a new machine with new
// device instances on the same disk overlay, tap and socket path, and
// checks that every device works on in the restored guest without a
// reboot.
func TestSaveRestore(t *testing.T) {
	testenv.NeedGuests(t)
	kernelPath := testenv.Kernel()
	_, err := os.Stat(kernelPath)
	need(t, err == nil, fmt.Sprintf("no kernel: %v", err))
	base := filepath.Join(testenv.Templates(), "base.ext4")
	_, err = os.Stat(base)
	need(t, err == nil, fmt.Sprintf("no template image: %v", err))
	kernel, err := os.ReadFile(kernelPath)
	if err != nil {
		t.Fatal(err)
	}
	initrd, err := testguest.Initramfs()
	if err != nil {
		t.Fatal(err)
	}
	nb := make([]byte, 6)
	rand.Read(nb)
	nonce := hex.EncodeToString(nb)
	dir := t.TempDir()
	overlay, uds, snap := filepath.Join(dir, "disk.overlay"), filepath.Join(dir, "v.sock"), filepath.Join(dir, "snap")
	os.Mkdir(snap, 0o755)
	tap, ifname, err := vnet.OpenTap("sfsvr%d")
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	if err := ifaceUp(ifname); err != nil {
		t.Fatal(err)
	}
	ifi, _ := net.InterfaceByName(ifname)
	stop := make(chan struct{})
	defer close(stop)
	frames := watchFrames(t, ifi.Index, stop)
	cmdline := "quiet sandfs_vmode=serve sandfs_vnonce=" + nonce

	exercise := func(m *vmm.Machine, phase string, wantBlk string) {
		t.Helper()
		body := patterned(seedOf(nonce+phase), 1<<20)
		if got := guestCmd(t, m, uds, "echo", body); got != string(body) {
			t.Fatalf("%s: vsock echo of 1 MiB differs (%d bytes back)", phase, len(got))
		}
		if got := guestCmd(t, m, uds, "blk "+phase, nil); got != "BLK OK "+wantBlk+"\n" {
			t.Fatalf("%s: blk: %q, want %q", phase, got, "BLK OK "+wantBlk)
		}
		got := guestCmd(t, m, uds, "rng", nil)
		if !regexp.MustCompile(`^RNG [0-9a-f]{64}\n$`).MatchString(got) || strings.Contains(got, strings.Repeat("0", 16)) {
			t.Fatalf("%s: rng: %q", phase, got)
		}
		marker := "SANDFS-NET-" + phase + "-" + nonce
		if got := guestCmd(t, m, uds, "net "+marker, nil); got != "NET OK\n" {
			t.Fatalf("%s: net: %q", phase, got)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !frames.saw(marker) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no frame with %q on %s", phase, marker, ifname)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: vsock echo 1 MiB ok, blk %q, rng %s, net frame seen on %s", phase, wantBlk, strings.TrimSpace(got)[:20], ifname)
	}

	a := newRig(t, kernel, initrd, cmdline, "", base, overlay, tap, uds)
	if err := a.m.Start(); err != nil {
		t.Fatal(err)
	}
	a.con.waitFor(t, a.m, "VTEST ready", 90*time.Second)
	exercise(a.m, "a1", "tok-a1=a1")

	if err := a.m.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.m.SaveDir(snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved in %v", time.Since(start))
	a.shutdown(t)

	st, err := vmm.LoadState(snap)
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for name, raw := range st.Devices {
		devs = append(devs, fmt.Sprintf("%s=%dB", name, len(raw)))
	}
	t.Logf("device state in the snapshot: %s", strings.Join(devs, " "))
	start = time.Now()
	b := newRig(t, kernel, initrd, cmdline, filepath.Join(snap, vmm.MemoryFile), base, overlay, tap, uds)
	defer b.shutdown(t)
	if err := b.m.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restored and resumed in %v", time.Since(start))
	exercise(b.m, "b1", "tok-a1=a1,tok-b1=b1")
	// The dump knows the restored kernel's per-CPU base (from the
	// snapshot's state) and finds the running kernel on it (vmm/percpu.go:
	// run-tests.sh takes a dump that says otherwise for the lab's fault).
	if s := b.m.StallReport(); !regexp.MustCompile(`gs: cpl=[0-3] .* per-cpu=0xffff[0-9a-f]{12} ok\n`).MatchString(s) || strings.Contains(s, "not the guest state") {
		t.Errorf("restored guest's dump: no per-CPU base found and matched, or its CR3 called foreign:\n%s", s)
	} else {
		t.Logf("restored guest's dump: %s", regexp.MustCompile(`gs: cpl=.*`).FindString(s))
	}
	if out := b.con.String(); strings.Contains(out, "VTEST start") {
		t.Errorf("restored guest rebooted:\n%s", out)
	}
}
