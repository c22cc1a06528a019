package vmm

import (
	"bytes"
	"fmt"
	"os"
)

// Initramfs builds an uncompressed cpio "newc" archive
// (Documentation/driver-api/early-userspace/buffer-format.rst), which the
// kernel unpacks without any RD_* decompressor. Used for test and benchmark
// guests: the VMM's own binary becomes /init (see GuestInit).
type Initramfs struct {
	buf bytes.Buffer
	ino uint32
}

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChr  = 0o020000
)

func (a *Initramfs) entry(name string, mode uint32, data []byte, major, minor uint32) {
	a.ino++
	fmt.Fprintf(&a.buf, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		a.ino, mode, 0, 0, 1, 0, len(data), 0, 0, major, minor, len(name)+1, 0)
	a.buf.WriteString(name)
	a.buf.WriteByte(0)
	a.pad()
	a.buf.Write(data)
	a.pad()
}

func (a *Initramfs) pad() {
	for a.buf.Len()%4 != 0 {
		a.buf.WriteByte(0)
	}
}

// Dir adds a directory.
func (a *Initramfs) Dir(name string) { a.entry(name, cpioDir|0o755, nil, 0, 0) }

// File adds a regular file.
func (a *Initramfs) File(name string, mode uint32, data []byte) {
	a.entry(name, cpioFile|mode&0o7777, data, 0, 0)
}

// CharDev adds a character device node.
func (a *Initramfs) CharDev(name string, major, minor uint32) {
	a.entry(name, cpioChr|0o600, nil, major, minor)
}

// Bytes ends the archive (the TRAILER!!! entry) and returns it.
func (a *Initramfs) Bytes() []byte {
	a.entry("TRAILER!!!", 0, nil, 0, 0)
	return a.buf.Bytes()
}

// SelfInitramfs is an initramfs whose /init is the running executable (a
// static Go binary), with /dev/console, /proc and /sys.
func SelfInitramfs() ([]byte, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("self initramfs: %w", err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		return nil, fmt.Errorf("self initramfs: %w", err)
	}
	var a Initramfs
	a.Dir("dev")
	a.CharDev("dev/console", 5, 1)
	a.Dir("proc")
	a.Dir("sys")
	a.Dir("tmp")
	a.File("init", 0o755, bin)
	return a.Bytes(), nil
}
