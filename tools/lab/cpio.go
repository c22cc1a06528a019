package lab

import (
	"bufio"
	"fmt"
	"io"
)

// cpioWriter writes a "newc" (SVR4, no CRC) cpio archive, the format the
// kernel unpacks as an initramfs. Only what the lab needs: directories,
// regular files, symlinks and device nodes, all owned by root.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	off int64
	err error
}

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: bufio.NewWriter(w), ino: 1} }

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
	modeChr  = 0o020000
)

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rmajor, rminor uint32) {
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

func (c *cpioWriter) dir(name string, perm uint32) { c.entry(name, modeDir|perm, nil, 0, 0) }
func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, modeFile|perm, data, 0, 0)
}
func (c *cpioWriter) symlink(name, target string) {
	c.entry(name, modeLink|0o777, []byte(target), 0, 0)
}
func (c *cpioWriter) chr(name string, perm, major, minor uint32) {
	c.entry(name, modeChr|perm, nil, major, minor)
}

func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
