package vmm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"syscall"

	"sandfs/ctl/msg"
	"sandfs/vmm/boot"
	"sandfs/vmm/bus"
	"sandfs/vmm/i8042"
	"sandfs/vmm/kvm"
	"sandfs/vmm/serial"
)

// MachineConfig describes one VM.
type MachineConfig struct {
	MemBytes uint64 // guest RAM, a multiple of 2 MiB
	CPUs     int    // 1..boot.MaxCPUs
	// Kernel is a bzImage; Initrd an optional initramfs; Cmdline is added
	// after boot.BaseCmdline (virtio_mmio.device= arguments come last).
	Kernel  []byte
	Initrd  []byte
	Cmdline string
	// Console receives the guest's serial output (nil: discarded).
	Console io.Writer
	// MemFile, for a restore, is the snapshot memory file mapped
	// MAP_PRIVATE as guest RAM instead of fresh anonymous memory.
	MemFile string
	// Tracking picks the dirty-page mechanism (dirty.go): "" probes for
	// TrackSoftDirty and falls back to TrackDirtyLog; either by name
	// forces it (soft-dirty fails where the probe does).
	Tracking string
	// KVMPath is /dev/kvm unless set.
	KVMPath string
	// Pagemap, if set, is /proc/self/pagemap opened beforehand, for a
	// process whose root has no /proc (the jail); taken over by the
	// machine. Otherwise NewMachine opens it if /proc is there.
	Pagemap *os.File
	// ClearRefs, likewise, is /proc/self/clear_refs opened for writing
	// beforehand: with Pagemap it lets a jailed VMM track dirty pages
	// with soft-dirty (dirty.go); without, it uses KVM's dirty log.
	ClearRefs *os.File
	Log       *slog.Logger
}

// ExitReason says why a machine ended.
type ExitReason string

// Exit reasons.
const (
	ExitRunning  ExitReason = ""         // not ended
	ExitReset    ExitReason = "reset"    // the guest rebooted (i8042 reset, triple fault): sandfs treats it as its exit
	ExitPoweroff ExitReason = "poweroff" // KVM_SYSTEM_EVENT_SHUTDOWN
	ExitCrash    ExitReason = "crash"    // KVM_SYSTEM_EVENT_CRASH
	ExitStopped  ExitReason = "stopped"  // the host called Stop
	ExitError    ExitReason = "error"    // a VMM or KVM failure; Err says which
)

// ErrEnded is returned by control calls on a machine that has ended.
var ErrEnded = errors.New("machine has ended")

// ErrNotPaused is returned by Save on a running machine: EBUSY to the
// daemon through the control socket.
var ErrNotPaused error = msg.Errorf(syscall.EBUSY, "machine is not paused")

// VirtioSlot is one virtio-mmio window and its interrupt line.
type VirtioSlot struct {
	Base, Size uint64
	IRQ        uint32
}

// Hooks are a device's lifecycle callbacks, all optional. Pause and
// Resume bracket a paused machine (after the vCPUs stop, before they run);
// Save returns a JSON-encodable value stored under the device's name in a
// snapshot and Restore gets it back (before Start); Close runs when the
// machine ends.
type Hooks struct {
	Pause   func()
	Resume  func()
	Save    func() (any, error)
	Restore func(data []byte) error
	Close   func() error
}

type mmioRange struct {
	base, size uint64
	dev        bus.MMIODevice
}

type pioRange struct {
	port, n uint16
	dev     bus.PIODevice
}

type namedHooks struct {
	name string
	Hooks
}

// Machine is one KVM VM: guest RAM, vCPUs, in-kernel irqchip and PIT,
// serial console, i8042, and whatever devices were added. See doc.go for
// the lifecycle and the lock order.
type Machine struct {
	cfg    MachineConfig
	log    *slog.Logger
	sys    *kvm.System
	vm     *kvm.VM
	ram    *guestRAM
	vcpus  []*vcpu
	serial *serial.Serial
	cmd    boot.Cmdline

	// Device maps: written only before Start, read-only after, so exits
	// dispatch without locks.
	mmios   []mmioRange
	pios    []pioRange
	hooks   []namedHooks
	nVirtio int
	// msrIndex is KVM_GET_MSR_INDEX_LIST, the MSRs a save reads; set
	// before the vCPUs start.
	msrIndex []uint32

	ctl     sync.Mutex // serialises Start/Pause/Resume/Save/Snapshot/Close
	started bool       // guarded by ctl
	paused  bool       // guarded by ctl
	closed  bool       // guarded by ctl: KVM fds and RAM released

	endOnce sync.Once
	done    chan struct{} // closed when the machine ends
	reason  ExitReason    // set before done is closed
	err     error         // set before done is closed
	// reaped is closed by reap once every vCPU goroutine has returned
	// and every device Close hook has run (started machines only); Close
	// waits for it before it unmaps kvm_run areas and guest RAM.
	reaped chan struct{}
}

// NewMachine creates the VM, its RAM and vCPUs, and the legacy devices
// (COM1 serial on IRQ 4, i8042). Add devices, then Start (or Restore).
func NewMachine(cfg MachineConfig) (m *Machine, err error) {
	if cfg.CPUs < 1 || cfg.CPUs > boot.MaxCPUs {
		return nil, fmt.Errorf("new machine: %d vCPUs, want 1..%d", cfg.CPUs, boot.MaxCPUs)
	}
	if cfg.KVMPath == "" {
		cfg.KVMPath = "/dev/kvm"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m = &Machine{cfg: cfg, log: cfg.Log, done: make(chan struct{}), reaped: make(chan struct{})}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.sys, err = kvm.Open(cfg.KVMPath); err != nil {
		return nil, err
	}
	for _, c := range kvm.Required {
		if m.sys.CheckExtension(c.Cap) == 0 {
			return nil, fmt.Errorf("new machine: KVM lacks %s", c.Name)
		}
	}
	if m.vm, err = m.sys.CreateVM(); err != nil {
		return nil, err
	}
	if err = m.vm.SetIdentityMapAddr(boot.IdentityMapAddr); err != nil {
		return nil, err
	}
	if err = m.vm.SetTSSAddr(boot.TSSAddr); err != nil {
		return nil, err
	}
	if err = m.vm.CreateIRQChip(); err != nil {
		return nil, err
	}
	if err = m.vm.CreatePIT2(kvm.PITSpeakerDummy); err != nil {
		return nil, err
	}
	if m.ram, err = mapRAM(cfg.MemBytes, cfg.MemFile, procFiles{cfg.Pagemap, cfg.ClearRefs}, cfg.Tracking); err != nil {
		return nil, err
	}
	for i, r := range m.ram.regions {
		if err = m.vm.SetUserMemoryRegion(kvm.MemoryRegion{
			Slot: uint32(i), Flags: m.ram.slotFlags(), GuestPhysAddr: r.GPA, MemorySize: r.Size,
			UserspaceAddr: uint64(uintptrOf(m.ram.mem[r.Offset:])),
		}); err != nil {
			return nil, err
		}
	}
	for i := 0; i < cfg.CPUs; i++ {
		k, err := m.vm.CreateVCPU(i)
		if err != nil {
			return nil, err
		}
		m.vcpus = append(m.vcpus, &vcpu{m: m, k: k, id: i,
			events: make(chan event, 4), exited: make(chan struct{})})
	}
	m.serial = serial.New(m, boot.SerialIRQ, cfg.Console)
	if err = m.AddPIO(serial.COM1Base, serial.Ports, m.serial); err != nil {
		return nil, err
	}
	if err = m.AddPIO(i8042.DataPort, 5, i8042.New(func() { m.end(ExitReset, nil) })); err != nil {
		return nil, err
	}
	m.cmd.Add(boot.BaseCmdline, cfg.Cmdline)
	return m, nil
}

// Memory returns guest RAM for devices (bus.Memory).
func (m *Machine) Memory() bus.Memory { return m.ram }

// IRQ returns the interrupt lines for devices (bus.IRQ).
func (m *Machine) IRQ() bus.IRQ { return m }

// SetIRQ implements bus.IRQ.SetIRQ with KVM_IRQ_LINE.
func (m *Machine) SetIRQ(line uint32, level bool) error { return m.vm.IRQLine(line, level) }

// Serial is the COM1 UART (for host input to the console).
func (m *Machine) Serial() *serial.Serial { return m.serial }

// AddMMIO maps dev at guest-physical [base, base+size). Only before Start.
func (m *Machine) AddMMIO(base, size uint64, dev bus.MMIODevice) error {
	if m.started {
		return fmt.Errorf("add mmio %#x: machine already started", base)
	}
	if size == 0 || base+size < base {
		return fmt.Errorf("add mmio %#x: bad size %#x", base, size)
	}
	for _, r := range m.mmios {
		if base < r.base+r.size && r.base < base+size {
			return fmt.Errorf("add mmio %#x+%#x: overlaps %#x+%#x", base, size, r.base, r.size)
		}
	}
	if _, err := m.ram.Slice(base, 1); err == nil {
		return fmt.Errorf("add mmio %#x: inside guest RAM", base)
	}
	m.mmios = append(m.mmios, mmioRange{base, size, dev})
	sort.Slice(m.mmios, func(i, j int) bool { return m.mmios[i].base < m.mmios[j].base })
	return nil
}

// AddPIO maps dev at I/O ports [port, port+n). Only before Start.
func (m *Machine) AddPIO(port, n uint16, dev bus.PIODevice) error {
	if m.started {
		return fmt.Errorf("add pio %#x: machine already started", port)
	}
	if n == 0 || uint32(port)+uint32(n) > 0x10000 {
		return fmt.Errorf("add pio %#x: bad count %d", port, n)
	}
	for _, r := range m.pios {
		if uint32(port) < uint32(r.port)+uint32(r.n) && uint32(r.port) < uint32(port)+uint32(n) {
			return fmt.Errorf("add pio %#x+%d: overlaps %#x+%d", port, n, r.port, r.n)
		}
	}
	m.pios = append(m.pios, pioRange{port, n, dev})
	return nil
}

// AddVirtio allocates the next virtio-mmio slot (a 4 KiB window in the MMIO
// hole and the next free IRQ line from 5), asks attach for the device to put
// there, maps it and declares it on the kernel command line
// (virtio_mmio.device=4K@<base>:<irq>). Slots are handed out in call
// order, so a restore must add the same devices in the same order.
func (m *Machine) AddVirtio(attach func(VirtioSlot) (bus.MMIODevice, error)) (VirtioSlot, error) {
	i := m.nVirtio
	if i >= boot.VirtioMMIOSlots || boot.VirtioIRQBase+i > boot.IRQMax {
		return VirtioSlot{}, fmt.Errorf("add virtio: no free slot (%d in use)", i)
	}
	s := VirtioSlot{Base: boot.VirtioMMIOBase + uint64(i)*boot.VirtioMMIOSize,
		Size: boot.VirtioMMIOSize, IRQ: uint32(boot.VirtioIRQBase + i)}
	dev, err := attach(s)
	if err != nil {
		return VirtioSlot{}, fmt.Errorf("add virtio slot %d: %w", i, err)
	}
	if err := m.AddMMIO(s.Base, s.Size, dev); err != nil {
		return VirtioSlot{}, err
	}
	m.nVirtio++
	m.cmd.AddVirtioMMIO(s.Base, s.Size, s.IRQ)
	return s, nil
}

// AddHooks registers a device's lifecycle callbacks under name (unique; the
// key of its state in a snapshot).
func (m *Machine) AddHooks(name string, h Hooks) error {
	for _, o := range m.hooks {
		if o.name == name {
			return fmt.Errorf("add hooks: duplicate device %q", name)
		}
	}
	m.hooks = append(m.hooks, namedHooks{name, h})
	return nil
}

// CPUs is the number of vCPUs.
func (m *Machine) CPUs() int { return len(m.vcpus) }

// MemBytes is the size of guest RAM.
func (m *Machine) MemBytes() uint64 { return m.cfg.MemBytes }

// Cmdline is the kernel command line Start will use.
func (m *Machine) Cmdline() string { return m.cmd.String() }

// Start loads the kernel and runs the vCPUs.
func (m *Machine) Start() error {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.started {
		return fmt.Errorf("start: already started")
	}
	if m.closed {
		return fmt.Errorf("start: %w", ErrEnded)
	}
	k, err := boot.ParseBzImage(m.cfg.Kernel)
	if err != nil {
		return err
	}
	bp, err := boot.Load(m.ram.low(), m.cfg.MemBytes, k, m.cfg.Initrd, m.cmd.String())
	if err != nil {
		return err
	}
	if err := boot.WriteMPTable(m.ram.low(), m.cfg.CPUs); err != nil {
		return err
	}
	supported, err := m.sys.SupportedCPUID()
	if err != nil {
		return err
	}
	if m.sys.CheckExtension(kvm.CapTSCDeadlineTimer) != 0 {
		supported = addTSCDeadline(supported)
	}
	for _, c := range m.vcpus {
		if err := c.setup(supported, len(m.vcpus), bp); err != nil {
			return fmt.Errorf("start: vcpu %d: %w", c.id, err)
		}
	}
	if err := m.loadMSRIndex(); err != nil {
		return err
	}
	m.started = true
	// Loaded into guest RAM: the caller may unmap the images now.
	m.cfg.Kernel, m.cfg.Initrd = nil, nil
	for _, c := range m.vcpus {
		go c.loop(false)
	}
	go m.reap()
	return nil
}

// reap runs the devices' Close hooks once the machine has ended and every
// vCPU goroutine has returned (end already kicked them), then closes
// reaped. It never touches kvm_run or RAM after that: Close waits for
// reaped before it unmaps them.
func (m *Machine) reap() {
	defer close(m.reaped)
	<-m.done
	for _, c := range m.vcpus {
		<-c.exited
	}
	m.serial.Flush()
	m.closeDevices()
}

// closeDevices runs every device's Close hook, in order.
func (m *Machine) closeDevices() {
	for _, h := range m.hooks {
		if h.Close != nil {
			if err := h.Close(); err != nil {
				m.log.Warn("close device", "device", h.name, "err", err)
			}
		}
	}
}

// end records why the machine ended (the first reason wins) and wakes every
// vCPU.
func (m *Machine) end(reason ExitReason, err error) {
	m.endOnce.Do(func() {
		m.reason, m.err = reason, err
		if err != nil {
			m.log.Error("machine ended", "reason", reason, "err", err)
		} else {
			m.log.Info("machine ended", "reason", reason)
		}
		close(m.done)
		for _, c := range m.vcpus {
			c.kick()
		}
	})
}

// Done is closed when the machine has ended.
func (m *Machine) Done() <-chan struct{} { return m.done }

// Exit returns why the machine ended (ExitRunning before), and the error
// for ExitError.
func (m *Machine) Exit() (ExitReason, error) {
	select {
	case <-m.done:
		return m.reason, m.err
	default:
		return ExitRunning, nil
	}
}

// Wait blocks until the machine has ended and its vCPU threads are gone.
func (m *Machine) Wait() (ExitReason, error) {
	<-m.done
	m.ctl.Lock()
	started := m.started
	m.ctl.Unlock()
	if started {
		for _, c := range m.vcpus {
			<-c.exited
		}
	}
	return m.reason, m.err
}

// Pause stops every vCPU outside KVM_RUN (each completes its pending I/O
// first) and then the devices' own goroutines. Pausing a paused machine is
// a no-op.
func (m *Machine) Pause() error {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return fmt.Errorf("pause: %w", ErrEnded)
	}
	if !m.started {
		return msg.Errorf(syscall.EBUSY, "pause: not started")
	}
	if m.paused {
		return nil
	}
	for _, c := range m.vcpus {
		if _, err := c.request(evPause); err != nil {
			return fmt.Errorf("pause: vcpu %d: %w", c.id, err)
		}
	}
	for _, h := range m.hooks {
		if h.Pause != nil {
			h.Pause()
		}
	}
	m.serial.Flush()
	m.paused = true
	return nil
}

// Resume restarts a paused machine.
func (m *Machine) Resume() error {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return fmt.Errorf("resume: %w", ErrEnded)
	}
	if !m.paused {
		return nil
	}
	for _, h := range m.hooks {
		if h.Resume != nil {
			h.Resume()
		}
	}
	for _, c := range m.vcpus {
		if _, err := c.request(evResume); err != nil {
			return fmt.Errorf("resume: vcpu %d: %w", c.id, err)
		}
	}
	m.paused = false
	return nil
}

// Paused reports whether the machine is paused.
func (m *Machine) Paused() bool {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	return m.paused
}

// Stop ends the machine (running or paused) and waits for its vCPU
// threads.
func (m *Machine) Stop() {
	m.end(ExitStopped, nil)
	m.Wait()
}

// Close stops the machine (if it still runs), runs the devices' Close hooks
// (also for a machine that never started), and then, once no vCPU thread,
// device goroutine or control call can touch them, releases the vCPUs'
// kvm_run areas, KVM and guest RAM. A second Close is a no-op.
func (m *Machine) Close() error {
	m.end(ExitStopped, nil) // kicks the vCPUs; a no-op if it already ended
	m.ctl.Lock()            // no control call (Pause, Save, Snapshot...) in flight
	defer m.ctl.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if m.started {
		<-m.reaped // vCPU goroutines gone, device Close hooks done
	} else {
		m.closeDevices()
	}
	return m.close()
}

// close releases KVM and RAM. Only from Close, or from NewMachine failing
// (nothing runs yet).
func (m *Machine) close() error {
	for _, c := range m.vcpus {
		c.k.Close()
	}
	if m.vm != nil {
		m.vm.Close()
		m.vm = nil
	}
	if m.sys != nil {
		m.sys.Close()
		m.sys = nil
	}
	if m.ram != nil {
		return m.ram.close()
	}
	return nil
}

// pio dispatches a port I/O exit. Unclaimed ports read as all ones and
// ignore writes, as on a PC bus with nothing there.
func (m *Machine) pio(io kvm.IO) {
	for _, r := range m.pios {
		if io.Port >= r.port && io.Port-r.port < r.n {
			off := io.Port - r.port
			for i := 0; i+io.Size <= len(io.Data); i += io.Size {
				if io.Out {
					r.dev.WritePIO(off, io.Data[i:i+io.Size])
				} else {
					r.dev.ReadPIO(off, io.Data[i:i+io.Size])
				}
			}
			return
		}
	}
	if !io.Out {
		for i := range io.Data {
			io.Data[i] = 0xff
		}
	}
}

// mmio dispatches an MMIO exit; unclaimed addresses read as zero.
func (m *Machine) mmio(mm kvm.MMIO) {
	i := sort.Search(len(m.mmios), func(i int) bool { return m.mmios[i].base+m.mmios[i].size > mm.Addr })
	if i < len(m.mmios) && mm.Addr >= m.mmios[i].base {
		r := m.mmios[i]
		if mm.Write {
			r.dev.WriteMMIO(mm.Addr-r.base, mm.Data)
		} else {
			r.dev.ReadMMIO(mm.Addr-r.base, mm.Data)
		}
		return
	}
	if !mm.Write {
		clear(mm.Data)
	}
}
