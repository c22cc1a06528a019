package lab

// The lab's persistent state (docs/lab.md "State"): `sandfs lab serve`
// keeps the daemon's state directory on an ext4 image on the host's disk,
// attached to the lab as a virtio-blk drive, so sandboxes paused to disk,
// snapshots and the template cache outlive the lab.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StateSerial is the state drive's virtio-blk serial, by which the lab
// finds it (/sys/block/vdX/serial).
const StateSerial = "sandfs-state"

// GuestStateMount is where lab serve mounts the state drive inside the
// lab; the daemon's state directory is its "state" (serve.sh).
const GuestStateMount = "/var/lib/sandfs"

// DefaultStateSize is the state image's size (sparse: the host's disk
// holds only what was written; the guest mounts it with discard).
const DefaultStateSize = 16 << 30

// DefaultStateImage is ${SANDFS_LAB_STATE:-$SANDFS_CACHE/lab/state.ext4}.
func DefaultStateImage() string {
	if p := os.Getenv("SANDFS_LAB_STATE"); p != "" {
		return p
	}
	return filepath.Join(CacheDir(), "lab", "state.ext4")
}

// StateDisk is a state image owned by this process: locked (one lab at a
// time), checked and of at least the size asked for.
type StateDisk struct {
	Path string
	lock *os.File
}

// OpenStateDisk locks the image at path (flock on path.lock, held until
// Close; a second lab gets EWOULDBLOCK with the owner's pid), makes it if
// missing (a sparse file of size bytes, mkfs.ext4), checks it (e2fsck
// -p: the journal of a lab that was killed is replayed) and grows it to
// size if it is smaller (resize2fs). An image e2fsck cannot repair is
// moved aside (path.damaged-<unix time>) and a new one made. logf, if
// not nil, gets one line per step that changed something.
func OpenStateDisk(path string, size int64, logf func(string, ...any)) (*StateDisk, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if size < 64<<20 || size > 1<<44 {
		return nil, fmt.Errorf("lab: state disk size out of range (64 MiB to 16 TiB) %d", size)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lab: state disk dir: %v", err)
	}
	lock, err := lockState(path + ".lock")
	if err != nil {
		return nil, err
	}
	d := &StateDisk{Path: path, lock: lock}
	if err := d.prepare(size, logf); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close releases the lock.
func (d *StateDisk) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// lockState takes the exclusive lock file at p and writes this
// process's pid into it.
func lockState(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lab: state disk lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lab: state disk %q is in use by another lab (pid %s; stop it, or set SANDFS_LAB_STATE to another image): %w",
				strings.TrimSuffix(p, ".lock"), strings.TrimSpace(string(owner)), err)
		}
		return nil, fmt.Errorf("lab: state disk lock %q: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// prepare makes, checks and grows the image (OpenStateDisk). Lock held.
func (d *StateDisk) prepare(size int64, logf func(string, ...any)) error {
	fi, err := os.Stat(d.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		logf("state disk %s: new, %d GiB sparse", d.Path, size>>30)
		return makeImage(d.Path, size)
	case err != nil:
		return fmt.Errorf("lab: state disk: %v", err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("lab: state disk is not a regular file %q", d.Path)
	}
	grow := fi.Size() < size
	if ok, out := fsck(d.Path, grow); !ok {
		aside := fmt.Sprintf("%s.damaged-%d", d.Path, time.Now().Unix())
		logf("state disk %s: e2fsck cannot repair it, moved to %s, a new one made:\n%s", d.Path, aside, out)
		if err := os.Rename(d.Path, aside); err != nil {
			return fmt.Errorf("lab: state disk: moving the damaged image aside: %v", err)
		}
		return makeImage(d.Path, size)
	}
	if !grow {
		return nil
	}
	logf("state disk %s: grown from %d to %d GiB", d.Path, fi.Size()>>30, size>>30)
	if err := os.Truncate(d.Path, size); err != nil {
		return fmt.Errorf("lab: state disk grow: %v", err)
	}
	if out, err := exec.Command("resize2fs", d.Path).CombinedOutput(); err != nil {
		return fmt.Errorf("lab: state disk grow: resize2fs: %v: %s", err, lastLine(out))
	}
	return nil
}

// makeImage writes a new sparse ext4 image of size bytes at p (via a
// temporary file: an image is complete or absent).
func makeImage(p string, size int64) error {
	tmp := p + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("lab: state disk create: %v", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("lab: state disk create: %v", err)
	}
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-L", StateSerial, tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("lab: state disk: mkfs.ext4: %v: %s (apt-get install e2fsprogs)", err, lastLine(out))
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("lab: state disk create: %v", err)
	}
	return nil
}

// fsck checks the image at p (e2fsck -p, forced with -f when it is to
// be resized) and reports whether it is usable, with e2fsck's output.
// An image -p cannot repair gets one e2fsck -fy.
func fsck(p string, force bool) (bool, string) {
	args := []string{"-p", p}
	if force {
		args = []string{"-f", "-p", p}
	}
	out, err := exec.Command("e2fsck", args...).CombinedOutput()
	if fsckOK(err) {
		return true, string(out)
	}
	out, err = exec.Command("e2fsck", "-f", "-y", p).CombinedOutput()
	return fsckOK(err), string(out)
}

// fsckOK: e2fsck exited 0 (clean), 1 (errors corrected) or 2 (corrected;
// a mounted root would reboot).
func fsckOK(err error) bool {
	var ee *exec.ExitError
	if err == nil {
		return true
	}
	return errors.As(err, &ee) && ee.ExitCode() > 0 && ee.ExitCode() < 4
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
