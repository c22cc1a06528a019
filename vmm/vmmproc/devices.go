package vmmproc

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"sandfs/vmm"
	"sandfs/vmm/bus"
	"sandfs/vmm/uds"
	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/blk"
	vnet "sandfs/vmm/virtio/net"
	"sandfs/vmm/virtio/p9"
	"sandfs/vmm/virtio/rng"
	"sandfs/vmm/virtio/vsock"
)

// virtioDevice is what every vmm/virtio device offers.
type virtioDevice interface {
	Transport() *virtio.Transport
	Close() error
}

// addVirtioDev adds dev (made by mk for its slot) with the standard
// hooks: pause/resume the transport, typed save/restore through JSON,
// close. A snapshot without the device's state is an error at restore,
// unless stateOptional: then the device stays as new (reset).
func addVirtioDev[D virtioDevice, S any](m *vmm.Machine, name string, mk func(vmm.VirtioSlot) (D, error),
	save func(D) S, restore func(D, S) error, closeExtra func() error, stateOptional bool) error {
	var dev D
	_, err := m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
		var err error
		dev, err = mk(s)
		if err != nil {
			return nil, err
		}
		return dev.Transport(), nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return m.AddHooks(name, vmm.Hooks{
		Pause:  func() { dev.Transport().Pause() },
		Resume: func() { dev.Transport().Resume() },
		Save:   func() (any, error) { return save(dev), nil },
		Restore: func(b []byte) error {
			if b == nil && stateOptional {
				return nil
			}
			if b == nil {
				return fmt.Errorf("no saved state")
			}
			var s S
			if err := json.Unmarshal(b, &s); err != nil {
				return err
			}
			return restore(dev, s)
		},
		Close: func() error {
			err := dev.Close()
			if closeExtra != nil {
				if e := closeExtra(); err == nil {
					err = e
				}
			}
			return err
		},
	})
}

// addDevices adds the virtio devices of cfg, in a fixed order (disks, net,
// vsock, rng, 9p) so that a restore gets the same slots and command line. It
// returns the copy-on-write disks, by index in cfg.Disks (nil for a disk
// without an overlay), for the control's clonedisk.
func addDevices(m *vmm.Machine, cfg *Config) (cows []*blk.COW, err error) {
	cows = make([]*blk.COW, len(cfg.Disks))
	for i, d := range cfg.Disks {
		var disk blk.Disk
		var err error
		if d.Overlay != "" {
			cows[i], err = blk.OpenCOW(d.Path, d.Overlay, blk.COWOptions{})
			disk = cows[i]
		} else {
			disk, err = blk.OpenFile(d.Path, d.ReadOnly)
		}
		if err != nil {
			return nil, err
		}
		err = addVirtioDev(m, fmt.Sprintf("blk%d", i),
			func(s vmm.VirtioSlot) (*blk.Device, error) {
				return blk.New(m.Memory(), m.IRQ(), s.IRQ, disk, blk.Config{ReadOnly: d.ReadOnly, ID: d.ID})
			},
			(*blk.Device).Save, (*blk.Device).Restore, disk.Close, false)
		if err != nil {
			disk.Close()
			return nil, err
		}
	}
	if cfg.Net != nil {
		tap := inheritedFile(cfg.Net.TapFD, "tap")
		if tap == nil {
			return nil, fmt.Errorf("net: tap fd %d is not open", cfg.Net.TapFD)
		}
		var nc vnet.Config
		if cfg.Net.MAC != "" {
			hw, err := net.ParseMAC(cfg.Net.MAC)
			if err != nil || len(hw) != 6 {
				return nil, fmt.Errorf("net: bad mac %q", cfg.Net.MAC)
			}
			copy(nc.MAC[:], hw)
		}
		if err := addVirtioDev(m, "net0",
			func(s vmm.VirtioSlot) (*vnet.Device, error) {
				return vnet.New(m.Memory(), m.IRQ(), s.IRQ, tap, nc), nil
			},
			(*vnet.Device).Save, (*vnet.Device).Restore, nil, false); err != nil {
			return nil, err
		}
	}
	if cfg.Vsock != nil {
		if err := addVirtioDev(m, "vsock0",
			func(s vmm.VirtioSlot) (*vsock.Device, error) {
				return vsock.New(m.Memory(), m.IRQ(), s.IRQ, vsock.Config{GuestCID: uint64(cfg.Vsock.CID), UDS: vsockName(cfg)})
			},
			(*vsock.Device).Save, (*vsock.Device).Restore, nil, false); err != nil {
			return nil, err
		}
	}
	if cfg.RNG {
		if err := addVirtioDev(m, "rng0",
			func(s vmm.VirtioSlot) (*rng.Device, error) { return rng.New(m.Memory(), m.IRQ(), s.IRQ), nil },
			(*rng.Device).Save, (*rng.Device).Restore, nil, false); err != nil {
			return nil, err
		}
	}
	if cfg.P9 != nil {
		if err := addP9(m, cfg); err != nil {
			return nil, err
		}
	}
	return cows, nil
}

// vsockName is the name by which the process binds cfg's vsock socket
// and dials the guest's, "<name>_<port>": the path itself where those
// fit a sockaddr_un, else its base name, relative to the working
// directory, which build makes the socket's directory.
func vsockName(cfg *Config) string {
	if len(cfg.Vsock.UDS)+len("_4294967295") <= uds.MaxPath {
		return cfg.Vsock.UDS
	}
	return filepath.Base(cfg.Vsock.UDS)
}

// addP9 adds the virtio-9p device of cfg. A snapshot saved without one
// (its guest booted before the device existed, and never saw it) leaves
// the restored device as the guest knows it: absent, reset.
func addP9(m *vmm.Machine, cfg *Config) error {
	sock := vsockName(cfg) + "_" + strconv.FormatUint(uint64(cfg.P9.Port), 10)
	return addVirtioDev(m, "9p0",
		func(s vmm.VirtioSlot) (*p9.Device, error) {
			return p9.New(m.Memory(), m.IRQ(), s.IRQ, p9.Config{Tag: cfg.P9.Tag, Socket: sock})
		},
		(*p9.Device).Save, (*p9.Device).Restore, nil, true)
}
