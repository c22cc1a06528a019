package labtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"
)

// Guest-side constants shared with the host side of the test.
const (
	guestListenPort = 5000 // host → guest echo
	hostListenPort  = 6000 // guest → host, the host echoes
	vsockBytes      = 10 << 20
	etherTypeOut    = 0x88b5 // guest → tap
	etherTypeIn     = 0x88b6 // tap → guest
)

// patterned returns n bytes of a PRNG stream keyed by seed (both sides
// generate it, so no 10 MB needs to cross anything but vsock).
func patterned(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5a4d))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// guestMain is /init in the test guest: it runs every device check, prints
// one "VTEST <check> OK|FAIL ..." line each, then reboots (which ends the
// machine).
func guestMain() {
	os.MkdirAll("/dev", 0o755)
	unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	unix.Mount("proc", "/proc", "proc", 0, "")
	unix.Mount("sysfs", "/sys", "sysfs", 0, "")
	nonce := os.Getenv("sandfs_vnonce")
	fmt.Printf("VTEST start nonce=%s\n", nonce)
	if os.Getenv("sandfs_vmode") == "serve" {
		guestServe()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	report := func(name string, err error, detail string) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fmt.Printf("VTEST %s FAIL %v\n", name, err)
		} else {
			fmt.Printf("VTEST %s OK %s\n", name, detail)
		}
	}
	run := func(name string, fn func() (string, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := fn()
			report(name, err, d)
		}()
	}
	run("rng", guestRNG)
	run("blk", func() (string, error) { return guestBlk(nonce) })
	run("net-tx", func() (string, error) { return guestNetTx(nonce) })
	run("net-rx", func() (string, error) { return guestNetRx(nonce) })
	run("vsock-h2g", guestVsockEcho)
	run("vsock-g2h", func() (string, error) { return guestVsockSend(nonce) })
	wg.Wait()
	fmt.Printf("VTEST DONE\n")
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {}
}

func guestRNG() (string, error) {
	f, err := os.Open("/dev/hwrng")
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, 64)
	if _, err := io.ReadFull(f, b); err != nil {
		return "", err
	}
	if bytes.Equal(b, make([]byte, 64)) {
		return "", fmt.Errorf("64 zero bytes")
	}
	cur, _ := os.ReadFile("/sys/class/misc/hw_random/rng_current")
	return fmt.Sprintf("%x rng_current=%s", b[:8], strings.TrimSpace(string(cur))), nil
}

func guestBlk(nonce string) (string, error) {
	os.MkdirAll("/mnt", 0o755)
	marker := []byte("SANDFS-BLK-MARKER-" + nonce + "\n")
	if err := unix.Mount("/dev/vda", "/mnt", "ext4", 0, ""); err != nil {
		return "", fmt.Errorf("mount /dev/vda: %w", err)
	}
	if err := os.WriteFile("/mnt/sandfs-vtest.txt", marker, 0o644); err != nil {
		return "", err
	}
	if err := unix.Unmount("/mnt", 0); err != nil {
		return "", fmt.Errorf("unmount: %w", err)
	}
	if err := unix.Mount("/dev/vda", "/mnt", "ext4", 0, ""); err != nil {
		return "", fmt.Errorf("remount /dev/vda: %w", err)
	}
	got, err := os.ReadFile("/mnt/sandfs-vtest.txt")
	if err != nil {
		return "", fmt.Errorf("after remount: %w", err)
	}
	if !bytes.Equal(got, marker) {
		return "", fmt.Errorf("after remount: read %q", got)
	}
	if err := unix.Unmount("/mnt", 0); err != nil {
		return "", fmt.Errorf("final unmount: %w", err)
	}
	serial, _ := os.ReadFile("/sys/block/vda/serial")
	return fmt.Sprintf("marker survives remount, serial=%q", strings.TrimSpace(string(serial))), nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ifUp brings eth0 up and returns its index and MAC.
func ifUp() (int, net.HardwareAddr, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(s)
	ifr, _ := unix.NewIfreq("eth0")
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return 0, nil, fmt.Errorf("SIOCGIFFLAGS eth0: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return 0, nil, fmt.Errorf("SIOCSIFFLAGS eth0: %w", err)
	}
	ifi, err := net.InterfaceByName("eth0")
	if err != nil {
		return 0, nil, err
	}
	return ifi.Index, ifi.HardwareAddr, nil
}

var ifOnce = sync.OnceValues(func() (struct {
	idx int
	mac net.HardwareAddr
}, error) {
	idx, mac, err := ifUp()
	return struct {
		idx int
		mac net.HardwareAddr
	}{idx, mac}, err
})

func guestNetTx(nonce string) (string, error) {
	return sendFrames("SANDFS-NET-MARKER-"+nonce, 10)
}

// sendFrames broadcasts n frames of type etherTypeOut carrying payload.
func sendFrames(payload string, n int) (string, error) {
	ifc, err := ifOnce()
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return "", fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	frame := make([]byte, 0, 64)
	frame = append(frame, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	frame = append(frame, ifc.mac...)
	frame = append(frame, etherTypeOut>>8, etherTypeOut&0xff)
	frame = append(frame, payload...)
	for len(frame) < 60 {
		frame = append(frame, 0)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(etherTypeOut), Ifindex: ifc.idx, Halen: 6}
	copy(sa.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	for range n {
		if err := unix.Sendto(fd, frame, 0, sa); err != nil {
			return "", fmt.Errorf("sendto: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Sprintf("sent %d frames from %s", n, ifc.mac), nil
}

func guestNetRx(nonce string) (string, error) {
	if _, err := ifOnce(); err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(etherTypeIn)))
	if err != nil {
		return "", fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 60})
	want := []byte("SANDFS-NET-HOST-" + nonce)
	b := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(fd, b, 0)
		if err != nil {
			return "", fmt.Errorf("no frame from the host: %w", err)
		}
		if bytes.Contains(b[:n], want) {
			return fmt.Sprintf("got %d-byte frame from the tap", n), nil
		}
	}
}

// guestVsockEcho accepts one connection on guestListenPort and echoes it.
func guestVsockEcho() (string, error) {
	l, err := vsock.Listen(guestListenPort, nil)
	if err != nil {
		return "", fmt.Errorf("vsock listen: %w", err)
	}
	defer l.Close()
	fmt.Printf("VTEST vsock-listening\n")
	c, err := l.Accept()
	if err != nil {
		return "", fmt.Errorf("vsock accept: %w", err)
	}
	defer c.Close()
	n, err := io.Copy(c, c)
	if err != nil {
		return "", fmt.Errorf("echo after %d bytes: %w", n, err)
	}
	c.(*vsock.Conn).CloseWrite()
	return fmt.Sprintf("echoed %d bytes", n), nil
}

// guestVsockSend connects to the host, sends vsockBytes and checks the
// host's echo.
func guestVsockSend(nonce string) (string, error) {
	var c *vsock.Conn
	var err error
	for range 50 { // the host listener exists before boot; retry anyway
		if c, err = vsock.Dial(vsock.Host, hostListenPort, nil); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return "", fmt.Errorf("vsock dial host: %w", err)
	}
	defer c.Close()
	data := patterned(seedOf(nonce), vsockBytes)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		c.CloseWrite()
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("read echo: %w (after %d bytes)", err, len(got))
	}
	if err := <-errc; err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		return "", fmt.Errorf("echo differs: %d bytes back", len(got))
	}
	return fmt.Sprintf("%d bytes round trip sha256=%x", len(got), sha256.Sum256(got)), nil
}

func seedOf(nonce string) uint64 {
	h := sha256.Sum256([]byte(nonce))
	return binary.LittleEndian.Uint64(h[:])
}
