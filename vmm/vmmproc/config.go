package vmmproc

import (
	"encoding/json"
	"fmt"
	"os"
)

// Config is what `sandfs vmm -config FILE` runs: the machine, its devices,
// where its console goes, and how the process is confined. Launch writes it
// as JSON; the process reads it.
type Config struct {
	ID       string // sandbox id, for logs and the cgroup name
	Kernel   string // bzImage path
	Initrd   string `json:",omitempty"` // optional initramfs path
	Cmdline  string `json:",omitempty"` // extra kernel arguments
	MemBytes uint64
	CPUs     int

	// Restore, if set, is a snapshot directory (package snapshot: meta
	// and mem, its parents beside it) to restore instead of booting; the
	// machine starts paused when StartPaused, running otherwise. A jailed
	// VMM sees its parents only if they are inside Jail.Work (jail.go).
	Restore     string `json:",omitempty"`
	StartPaused bool   `json:",omitempty"`

	Disks []DiskConfig `json:",omitempty"` // virtio-blk, in slot order
	RNG   bool         `json:",omitempty"` // virtio-rng
	Net   *NetConfig   `json:",omitempty"` // virtio-net
	Vsock *VsockConfig `json:",omitempty"` // virtio-vsock
	P9    *P9Config    `json:",omitempty"` // virtio-9p (needs Vsock)

	// Labels are the launcher's notes on the machine (e.g. the identity
	// of its disk's base image), written with the config and read back
	// by Adopt's Config after a daemon restart; the process ignores them.
	Labels map[string]string `json:",omitempty"`

	// Client side (Launch), not used by the process itself:
	Binary  string   `json:"-"` // the VMM binary (sandfs-vmm, or sandfs: run as "vmm -config FILE"); default: this executable
	Socket  string   `json:"-"` // control socket path (Launch creates it)
	Console string   `json:"-"` // console log file (Launch opens it for append)
	LogFile string   `json:"-"` // the process's stderr (default: discarded after the tail is kept)
	TapFD   *os.File `json:"-"` // an open tap, passed to the process (Net.TapFD is set for it)
	// Env is the process's whole environment (default: empty; the
	// daemon's own is never passed on).
	Env []string `json:"-"`
	// Detached: the process outlives the daemon (its own session, no
	// parent-death signal) and is found again by Adopt (adopt.go).
	Detached bool `json:"-"`

	Jail JailConfig `json:",omitempty"`

	// TestHooks enables the "x-" control verbs used by tests (x-syscall).
	TestHooks bool `json:",omitempty"`
}

// DiskConfig is one virtio-blk disk: Path itself (ReadOnly or not), or Path as
// a read-only base with copy-on-write Overlay.
type DiskConfig struct {
	Path     string
	Overlay  string `json:",omitempty"`
	ReadOnly bool   `json:",omitempty"`
	ID       string `json:",omitempty"`
}

// NetConfig is the virtio-net device: the tap fd the process inherits.
type NetConfig struct {
	TapFD int
	MAC   string `json:",omitempty"`
}

// VsockConfig is the hybrid vsock: guest CID and the host unix socket path
// (host→guest: connect to UDS, send "CONNECT <port>\n"; guest→host: the VMM
// dials UDS_<port>).
type VsockConfig struct {
	CID uint32
	UDS string
}

// P9Config is the virtio-9p transport device (vmm/virtio/p9): the guest
// mounts Tag with trans=virtio, and the device carries the 9P frames to
// the unix socket "<Vsock.UDS>_<Port>", the one a guest's vsock
// connection to host port Port reaches (so the jail needs nothing more).
type P9Config struct {
	Tag  string
	Port uint32
}

// JailConfig confines the VMM process. Namespaces and the cgroup are set
// up by Launch (it needs root); the root (jail.go) is built by the process
// before it opens anything inside it; Seccomp and the uid/gid switch are
// applied by the process itself once its devices are open.
type JailConfig struct {
	Namespaces bool `json:",omitempty"` // new mount, PID, IPC, network and UTS namespaces
	// Root, if set, is an empty directory (the daemon's, not the VMM's
	// uid's) on which the process builds its own root, a small read-only
	// tmpfs in its mount namespace holding only the paths it needs
	// (jailMounts), and pivots into it. Needs Namespaces and absolute,
	// clean paths in the config.
	Root string `json:",omitempty"`
	// Work is the one directory the jailed VMM writes: disk overlays
	// (and their maps) must be in it, snapshots are saved into it. It
	// should belong to UID/GID and to nothing else.
	Work    string `json:",omitempty"`
	Seccomp bool   `json:",omitempty"` // syscall allowlist; others kill the process
	UID     int    `json:",omitempty"` // drop to this uid/gid after setup (0: keep)
	GID     int    `json:",omitempty"`
	Cgroup  string `json:",omitempty"` // cgroup to create and run in, e.g. "sandfs/t1", in the host's layout (package cgroup); "" none
	MemMax  uint64 `json:",omitempty"` // memory limit in bytes; 0: MemBytes + 128 MiB
	CPUMax  int    `json:",omitempty"` // CPU limit in percent of one CPU; 0: 100 × CPUs
	PidsMax int    `json:",omitempty"` // task limit (threads count); 0: 64
}

func (c *Config) validate() error {
	if c.Kernel == "" && c.Restore == "" {
		return fmt.Errorf("config: no kernel")
	}
	if c.MemBytes == 0 || c.MemBytes%(2<<20) != 0 {
		return fmt.Errorf("config: memory %d is not a positive multiple of 2 MiB", c.MemBytes)
	}
	if c.CPUs < 1 {
		return fmt.Errorf("config: %d vCPUs", c.CPUs)
	}
	if c.P9 != nil && c.Vsock == nil {
		return fmt.Errorf("config: virtio-9p without vsock (its socket is <Vsock.UDS>_<port>)")
	}
	return nil
}

// ReadConfig reads a JSON Config.
func ReadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	return &c, c.validate()
}
