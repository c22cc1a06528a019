package vmm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	// Tracking picks the dirty-page mechanism (dirty.go): "" takes
	// TrackSoftDirty where the kernel has PAGEMAP_SCAN and the probe
	// passes, else TrackDirtyLog; either by name forces it (soft-dirty
	// fails where the probe does).
	Tracking string
	// KVMPath is /dev/kvm unless set.
	KVMPath string
	// Pagemap, if set, is /proc/self/pagemap opened beforehand, for a
	// process whose root has no /proc (the jail); taken over by the
	// machine. Otherwise NewMachine opens it if /proc is there.
	Pagemap *os.File
	// ClearRefs, likewise, is /proc/self/clear_refs opened for writing
	// beforehand: with Pagemap it lets a jailed VMM track dirty pages
	// with soft-dirty where Tracking allows it (dirty.go); without, it
	// uses KVM's dirty log.
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
	undebug func() // registerDebug's; nil when not dumping
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
	// Not m in the closure: the failing return sets it to nil first.
	built := m
	defer func() {
		if err != nil {
			built.close()
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
	m.registerDebug()
	go m.reap()
	return nil
}
