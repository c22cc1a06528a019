package sbnet

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// InNS runs fn on an OS thread of its own switched to namespace ns. The
// thread is locked and never unlocked, so Go ends it with the goroutine:
// no other goroutine ever runs in ns.
func InNS(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// NewNS makes a network namespace and runs fn in it (as InNS does). It
// returns a handle to the namespace, which lives as long as the handle
// or anything else made in it that holds it (a tap's descriptor does).
func NewNS(fn func() error) (netns.NsHandle, error) {
	ns := netns.None()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("unshare: %w", err)
			return
		}
		h, err := netns.Get()
		if err != nil {
			done <- fmt.Errorf("open namespace: %w", err)
			return
		}
		ns = h
		done <- fn()
	}()
	if err := <-done; err != nil {
		ns.Close()
		return netns.None(), err
	}
	return ns, nil
}

// TapNS is the network namespace of the tap that process pid (its VMM)
// holds: each of its descriptors open on /dev/net/tun (the number it
// was handed may have been closed: the VMM polls a duplicate) is copied
// with pidfd_getfd(2) and asked for its device's namespace
// (TUNGETDEVNETNS, Linux 5.2); the copy is closed, so only the process
// holds the tap.
func TapNS(pid int) (netns.NsHandle, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return netns.None(), fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return netns.None(), err
	}
	for _, e := range ents {
		target, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(dir + "/" + e.Name()); err != nil || l != "/dev/net/tun" {
			continue
		}
		fd, err := unix.PidfdGetfd(pfd, target, 0)
		if err != nil {
			continue // closed meanwhile
		}
		nsfd, err := unix.IoctlRetInt(fd, unix.TUNGETDEVNETNS)
		unix.Close(fd)
		if err != nil {
			return netns.None(), fmt.Errorf("TUNGETDEVNETNS of pid %d's fd %d: %w", pid, target, err)
		}
		unix.CloseOnExec(nsfd)
		return netns.NsHandle(nsfd), nil
	}
	return netns.None(), fmt.Errorf("pid %d holds no tap", pid)
}

// sysctlOn writes a /proc/sys value; in InNS it is that namespace's
// (net.* sysctls are resolved in the opener's namespace).
func sysctlOn(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("sysctl: %w", err)
	}
	return nil
}
