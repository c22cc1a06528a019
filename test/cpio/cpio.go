// Package cpio writes "newc" (SVR4, no CRC) cpio archives, the format the
// kernel unpacks as an initramfs without any RD_* decompressor
// (Documentation/driver-api/early-userspace/buffer-format.rst). Only what
// test and lab guests need: directories, regular files, symlinks and
// character devices, all owned by root. Used by the lab (tools/lab) and
// the VMM's test and benchmark guests (vmm/testguest, vmm/bench).
//
// One entry:
//
//	"070701" ino mode uid gid nlink mtime filesize devmajor devminor
//	         rdevmajor rdevminor namesize check    (13 × 8 hex digits)
//	name NUL, padded to 4 bytes; data, padded to 4 bytes
//
// and the archive ends with an entry named "TRAILER!!!".
package cpio

import (
	"bufio"
	"fmt"
	"io"
)

// Writer writes one archive; the first error sticks and Close returns it.
type Writer struct {
	w   *bufio.Writer
	ino uint32
	off int64
	err error
}

// NewWriter returns a Writer that writes the archive to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w), ino: 1} }

// File type bits of an entry's mode (S_IFDIR, S_IFREG, S_IFLNK, S_IFCHR).
const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
	modeChr  = 0o020000
)

func (c *Writer) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.off += int64(n)
	c.err = err
}

func (c *Writer) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *Writer) entry(name string, mode uint32, data []byte, rmajor, rminor uint32) {
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.ino++
	c.write([]byte(hdr))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad()
	c.write(data)
	c.pad()
}

// Dir adds a directory.
func (c *Writer) Dir(name string, perm uint32) { c.entry(name, modeDir|perm, nil, 0, 0) }

// File adds a regular file holding data.
func (c *Writer) File(name string, perm uint32, data []byte) {
	c.entry(name, modeFile|perm, data, 0, 0)
}

// Symlink adds a symbolic link to target.
func (c *Writer) Symlink(name, target string) {
	c.entry(name, modeLink|0o777, []byte(target), 0, 0)
}

// CharDev adds a character device node.
func (c *Writer) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, modeChr|perm, nil, major, minor)
}

// Close ends the archive (the TRAILER!!! entry) and flushes it.
func (c *Writer) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
