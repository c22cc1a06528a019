package world

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
)

// userThread runs functions on one OS thread whose file system
// credentials are a user's: its fsuid, fsgid and supplementary groups,
// set on that thread alone (setfsuid, setfsgid and the raw setgroups
// system call are per thread). The kernel then checks the thread's file
// operations as that user's: a change of fsuid from 0 to another user
// also drops the file capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN,
// CAP_FOWNER, CAP_FSETID, CAP_MKNOD...) from the thread's effective set.
// The thread is locked to its goroutine and never unlocked, so it ends
// with it (the Go runtime starts no thread from a locked one: its
// credentials reach no other goroutine).
type userThread struct {
	do chan func()
}

// startUser starts a thread with who's file system credentials.
func startUser(who cred.Cred) (*userThread, error) {
	t := &userThread{do: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := setFSCreds(who); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for f := range t.do {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("credentials of uid %d: %w", who.UID, err)
	}
	return t, nil
}

// run runs f on the thread and returns its error.
func (t *userThread) run(f func() error) error {
	errc := make(chan error, 1)
	t.do <- func() { errc <- f() }
	return <-errc
}

// stop ends the thread.
func (t *userThread) stop() { close(t.do) }

// setFSCreds gives the calling (locked) thread who's file system
// credentials: groups first, then fsgid, then fsuid (which drops the
// file capabilities), each checked.
func setFSCreds(who cred.Cred) error {
	var gs []uint32
	if who.Groups != nil {
		gs = who.Groups()
	}
	if len(gs) > 1<<16 {
		return syscall.EINVAL
	}
	var p unsafe.Pointer
	if len(gs) > 0 {
		p = unsafe.Pointer(&gs[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	unix.Setfsgid(int(who.GID))
	if g, _ := unix.SetfsgidRetGid(-1); g != int(who.GID) {
		return fmt.Errorf("setfsgid %d: still %d: %w", who.GID, g, syscall.EPERM)
	}
	unix.Setfsuid(int(who.UID))
	if u, _ := unix.SetfsuidRetUid(-1); u != int(who.UID) {
		return fmt.Errorf("setfsuid %d: still %d: %w", who.UID, u, syscall.EPERM)
	}
	return nil
}
