package labtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/syncbuf"
	"sandfs/test/testenv"
	"sandfs/vmm"
	"sandfs/vmm/bus"
	"sandfs/vmm/testguest"
	"sandfs/vmm/virtio/blk"
	vnet "sandfs/vmm/virtio/net"
	"sandfs/vmm/virtio/rng"
	"sandfs/vmm/virtio/vsock"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// TestMain doubles as the guest's /init (the test binary is the initramfs).
func TestMain(m *testing.M) {
	if os.Getpid() == 1 && os.Args[0] == "/init" {
		guestMain()
	}
	os.Exit(m.Run())
}

// need skips on a developer's machine, and fails under CI or in the lab,
// when a built file is missing (testenv.Need).
func need(t *testing.T, ok bool, why string) {
	t.Helper()
	testenv.Need(t, ok, why)
}

// console is the guest's serial output, goroutine-safe (syncbuf).
type console struct{ syncbuf.Buffer }

// waitFor polls the console of m until it contains s; on timeout it fails
// with where m's vCPUs stand.
func (c *console) waitFor(t *testing.T, m *vmm.Machine, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(c.String(), s) {
		if time.Now().After(deadline) {
			out := c.String()
			if len(out) > 4000 {
				out = out[len(out)-4000:]
			}
			// The vCPUs' RIPs: run-tests.sh reruns a test whose guest a
			// vCPU left in the lab kernel's SVM code (the lab's stall).
			t.Fatalf("no %q on the console within %v; vCPUs:\n%s\nconsole:\n%s", s, d, m.StallReport(), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ifaceUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS %s: %w", name, err)
	}
	return nil
}

// TestDevicesInGuest boots one guest with blk, net, rng and vsock and
// checks each end to end.
func TestDevicesInGuest(t *testing.T) {
	testenv.NeedGuests(t)
	kernelPath := testenv.Kernel()
	_, err := os.Stat(kernelPath)
	need(t, err == nil, fmt.Sprintf("no kernel: %v", err))
	base := filepath.Join(testenv.Templates(), "base.ext4")
	baseInfo, err := os.Stat(base)
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

	con := &console{}
	m, err := vmm.NewMachine(vmm.MachineConfig{
		MemBytes: 256 << 20, CPUs: 1, Kernel: kernel, Initrd: initrd,
		Cmdline: "quiet sandfs_vnonce=" + nonce, Console: con,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()

	// blk: the template, copy-on-write.
	overlay := filepath.Join(dir, "disk.overlay")
	disk, err := blk.OpenCOW(base, overlay, blk.COWOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	t.Logf("blk: base %s (%d bytes), reflink=%v", base, baseInfo.Size(), disk.Reflink())
	if _, err := m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
		d, err := blk.New(m.Memory(), m.IRQ(), s.IRQ, disk, blk.Config{ID: "sandfs-vtest"})
		if err != nil {
			return nil, err
		}
		return d.Transport(), nil
	}); err != nil {
		t.Fatal(err)
	}

	// net: a fresh tap, up, with a packet socket on the host side.
	tap, ifname, err := vnet.OpenTap("sfsvt%d")
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	if err := ifaceUp(ifname); err != nil {
		t.Fatal(err)
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	netSeen := make(chan string, 1)
	stopNet := make(chan struct{})
	defer close(stopNet)
	startHostNet(t, ifi.Index, nonce, netSeen, stopNet)
	var ndev *vnet.Device
	if _, err := m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
		ndev = vnet.New(m.Memory(), m.IRQ(), s.IRQ, tap, vnet.Config{})
		return ndev.Transport(), nil
	}); err != nil {
		t.Fatal(err)
	}

	// vsock, with the host's echo listener for guest → host.
	uds := filepath.Join(dir, "v.sock")
	var vdev *vsock.Device
	if _, err := m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
		var err error
		vdev, err = vsock.New(m.Memory(), m.IRQ(), s.IRQ, vsock.Config{GuestCID: 3, UDS: uds})
		if err != nil {
			return nil, err
		}
		return vdev.Transport(), nil
	}); err != nil {
		t.Fatal(err)
	}
	defer vdev.Close()
	echoLn, err := net.Listen("unix", fmt.Sprintf("%s_%d", uds, hostListenPort))
	if err != nil {
		t.Fatal(err)
	}
	defer echoLn.Close()
	echoed := make(chan int64, 1)
	go func() {
		c, err := echoLn.Accept()
		if err != nil {
			echoed <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(c, c)
		c.(*net.UnixConn).CloseWrite()
		echoed <- n
	}()

	// rng.
	if _, err := m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
		return rng.New(m.Memory(), m.IRQ(), s.IRQ).Transport(), nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("cmdline: %s", m.Cmdline())

	start := time.Now()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	con.waitFor(t, m, "VTEST start", 90*time.Second)
	t.Logf("guest init after %v", time.Since(start))

	// host → guest vsock: 10 MB through the guest's echo server.
	con.waitFor(t, m, "VTEST vsock-listening", 60*time.Second)
	h2g := time.Now()
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	hc, err := hybrid.Dial(dctx, uds, guestListenPort)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	hc.SetReadDeadline(time.Now().Add(4 * time.Minute))
	up := patterned(seedOf(nonce)+1, vsockBytes)
	go func() {
		hc.Write(up)
		hc.(*net.UnixConn).CloseWrite()
	}()
	back, err := io.ReadAll(hc)
	if err != nil {
		t.Fatalf("vsock host→guest: read echo: %v after %d bytes", err, len(back))
	}
	if sha256.Sum256(back) != sha256.Sum256(up) {
		t.Fatalf("vsock host→guest: echo differs (%d of %d bytes)", len(back), len(up))
	}
	t.Logf("vsock host→guest: %d bytes echoed intact in %v (sha256 %x)", len(back), time.Since(h2g), sha256.Sum256(back))

	con.waitFor(t, m, "VTEST DONE", 4*time.Minute)
	out := con.String()
	for _, check := range []string{"rng", "blk", "net-tx", "net-rx", "vsock-h2g", "vsock-g2h"} {
		re := regexp.MustCompile(`VTEST ` + check + ` (OK|FAIL)[^\n]*`)
		l := re.FindString(out)
		if !strings.Contains(l, " OK") {
			t.Errorf("guest check %s: %q", check, l)
		} else {
			t.Logf("guest: %s", l)
		}
	}
	if n := <-echoed; n != vsockBytes {
		t.Errorf("host echo server saw %d bytes, want %d", n, vsockBytes)
	}
	select {
	case f := <-netSeen:
		t.Logf("net: host saw the guest's frame on %s: %s", ifname, f)
	case <-time.After(5 * time.Second):
		t.Errorf("net: no guest frame with the marker reached %s (device tx=%d)", ifname, ndev.TxFrames.Load())
	}
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Errorf("guest did not reboot")
	}
	if r, err := m.Wait(); r != vmm.ExitReset || err != nil {
		t.Errorf("Wait = %v, %v; want reset", r, err)
	}
	m.Close()
	closed = true

	// blk: reopen the overlay as a restarted VMM would; the marker is in
	// the sandbox's disk and in none of the base's bytes at those chunks.
	if err := disk.Close(); err != nil {
		t.Fatal(err)
	}
	checkOverlay(t, base, baseInfo, overlay, "SANDFS-BLK-MARKER-"+nonce)
}

// startHostNet captures frames arriving from the guest on the tap and sends
// frames toward the guest.
func startHostNet(t *testing.T, ifindex int, nonce string, seen chan<- string, stop <-chan struct{}) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	want := []byte("SANDFS-NET-MARKER-" + nonce)
	go func() {
		defer unix.Close(fd)
		b := make([]byte, 2048)
		frame := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, etherTypeIn >> 8, etherTypeIn & 0xff}
		frame = append(frame, "SANDFS-NET-HOST-"+nonce...)
		for len(frame) < 60 {
			frame = append(frame, 0)
		}
		sa := &unix.SockaddrLinklayer{Protocol: htons(etherTypeIn), Ifindex: ifindex, Halen: 6}
		copy(sa.Addr[:], frame[:6])
		sent := false
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Sendto(fd, frame, 0, sa) // toward the guest, until it gets one
			n, from, err := unix.Recvfrom(fd, b, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // our own frame
			}
			if !sent && bytes.Contains(b[:n], want) {
				sent = true
				seen <- fmt.Sprintf("%d bytes, src %x, type %04x", n, b[6:12], uint16(b[12])<<8|uint16(b[13]))
			}
		}
	}()
}

func checkOverlay(t *testing.T, base string, baseInfo os.FileInfo, overlay, marker string) {
	t.Helper()
	disk, err := blk.OpenCOW(base, overlay, blk.COWOptions{})
	if err != nil {
		t.Fatalf("reopen overlay: %v", err)
	}
	defer disk.Close()
	bf, err := os.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	chunks := disk.Written()
	found := false
	buf := make([]byte, blk.ChunkSize)
	bbuf := make([]byte, blk.ChunkSize)
	for _, c := range chunks {
		off := c * blk.ChunkSize
		n := min(int64(blk.ChunkSize), disk.Size()-off)
		if _, err := disk.ReadAt(buf[:n], off); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf[:n], []byte(marker)) {
			found = true
		}
		if _, err := bf.ReadAt(bbuf[:n], off); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if bytes.Contains(bbuf[:n], []byte(marker)) {
			t.Fatalf("marker found in the base image at chunk %d", c)
		}
	}
	if disk.Reflink() { // the overlay is a whole clone: scan it all
		big := make([]byte, 1<<20)
		for off := int64(0); off < disk.Size() && !found; off += int64(len(big)) - int64(len(marker)) {
			n := min(int64(len(big)), disk.Size()-off)
			if _, err := disk.ReadAt(big[:n], off); err != nil {
				t.Fatal(err)
			}
			found = bytes.Contains(big[:n], []byte(marker))
		}
	}
	if !found {
		t.Fatalf("marker not in the reopened disk (%d chunks written, reflink=%v)", len(chunks), disk.Reflink())
	}
	if fi, err := os.Stat(base); err != nil || fi.Size() != baseInfo.Size() || !fi.ModTime().Equal(baseInfo.ModTime()) {
		t.Fatalf("base image changed: %v", err)
	}
	t.Logf("blk: marker in the reopened overlay (%d chunks written by the guest), absent from the base", len(chunks))
}
