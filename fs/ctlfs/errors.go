package ctlfs

import "syscall"

// Errors of the file kinds themselves (ctl's carry their own errno).
var (
	errAccess error = syscall.EACCES // open for an access the file does not offer
	errBadFD  error = syscall.EBADF  // write on a read-only open, or the reverse
)
