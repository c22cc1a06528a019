package vmmproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The spare's side of spare.go: waiting for its arguments and
// descriptors, and showing them in its command line.

// awaitHandoff is a spare's wait (Main with -spare): it reads its
// message from fd 3, puts each descriptor at its number (fd 3, the
// socket, is replaced by the control socket) and returns the arguments.
func awaitHandoff() ([]string, error) {
	buf := make([]byte, maxHandoff)
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := unix.Recvmsg(3, buf, oob, 0)
	if err != nil {
		return nil, fmt.Errorf("spare: %w", err)
	}
	if n == 0 {
		return nil, errors.New("spare: the launcher closed its socket unsent")
	}
	var h handoff
	if err := json.Unmarshal(buf[:n], &h); err != nil {
		return nil, fmt.Errorf("spare: %w", err)
	}
	var got []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("spare: %w", err)
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				return nil, fmt.Errorf("spare: %w", err)
			}
			got = append(got, fds...)
		}
	}
	if len(got) != len(h.FDs) {
		return nil, fmt.Errorf("spare: %d descriptors for %d numbers", len(got), len(h.FDs))
	}
	// Out of the way first: a received descriptor may hold a number
	// another is to take.
	for i, fd := range got {
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 100)
		if err != nil {
			return nil, fmt.Errorf("spare: %w", err)
		}
		unix.Close(fd)
		got[i] = high
	}
	for i, fd := range got {
		if h.FDs[i] < 0 || h.FDs[i] >= 100 {
			return nil, fmt.Errorf("spare: descriptor number %d", h.FDs[i])
		}
		if err := unix.Dup3(fd, h.FDs[i], 0); err != nil {
			return nil, fmt.Errorf("spare: %w", err)
		}
		unix.Close(fd)
	}
	return h.Args, nil
}

// retitle writes args over the process's command line from its second
// argument on (after "vmm"), where a spare's "-spare" and titleRoom
// were, NUL-separated and NUL-padded, as setproctitle does: the kernel
// shows that memory as /proc/self/cmdline. Arguments that do not fit are
// cut. The arguments must lie one after the other (they do, as the
// kernel lays them out); otherwise nothing is written.
func retitle(args []string) {
	if len(os.Args) < 3 {
		return
	}
	start := unsafe.Pointer(unsafe.StringData(os.Args[2]))
	size := 0
	for _, a := range os.Args[2:] {
		if unsafe.Pointer(unsafe.StringData(a)) != unsafe.Add(start, size) {
			return
		}
		size += len(a) + 1
	}
	room := unsafe.Slice((*byte)(start), size-1) // the last one's NUL stays
	n := copy(room, strings.Join(args, "\x00"))
	clear(room[n:])
}
