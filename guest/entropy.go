package guest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// The bounds of the entropy verb's input, in bytes: at least a CRNG seed
// (32 bytes), at most what one message should carry.
const (
	minEntropy = 32
	maxEntropy = 256
)

// parseEntropy decodes the entropy verb's argument: hex of minEntropy to
// maxEntropy bytes.
func parseEntropy(s string) ([]byte, error) {
	if len(s) < 2*minEntropy || len(s) > 2*maxEntropy || len(s)%2 != 0 {
		return nil, msg.Errorf(syscall.EINVAL, "entropy: want %d..%d bytes as hex, got %d characters", minEntropy, maxEntropy, len(s))
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, msg.Errorf(syscall.EINVAL, "entropy: not hex: %s", msg.Cite(s[:min(len(s), 16)]))
	}
	return b, nil
}

// AddEntropy mixes b into the kernel's input pool, credited with
// 8 bits a byte (RNDADDENTROPY on /dev/urandom), then makes the CRNG
// reseed from it at once (RNDRESEEDCRNG): after a snapshot restore every
// guest otherwise draws from the same CRNG state. Needs CAP_SYS_ADMIN.
func AddEntropy(b []byte) error {
	if len(b) == 0 || len(b) > maxEntropy {
		return fmt.Errorf("entropy: %d bytes", len(b))
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+(len(b)+3)&^3)
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(b)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(b)))
	copy(info[8:], b)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); e != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", e)
	}
	return nil
}
