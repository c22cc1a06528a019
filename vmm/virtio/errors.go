package virtio

import "io"

var (
	errEOF        = io.EOF
	errShortWrite = io.ErrShortWrite
)
