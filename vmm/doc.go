// Package vmm is the sandfs virtual machine: one KVM VM (Machine) with
// its vCPUs, guest memory, legacy devices and snapshot state, as an
// in-process API. The virtio devices are in vmm/virtio, KVM's ioctls in
// vmm/kvm, the boot protocol in vmm/boot.
//
// # Machine (in-process API)
//
//	m, err := vmm.NewMachine(vmm.MachineConfig{MemBytes: 256 << 20, CPUs: 2,
//		Kernel: bzImage, Initrd: initrd, Cmdline: "quiet", Console: f})
//	slot, err := m.AddVirtio(func(s vmm.VirtioSlot) (bus.MMIODevice, error) {
//		d := rng.New(m.Memory(), m.IRQ(), s.IRQ)
//		return d.Transport(), nil
//	})
//	m.AddHooks("rng0", vmm.Hooks{Pause: ..., Resume: ..., Save: ..., Restore: ..., Close: ...})
//	err = m.Start()             // load kernel, run vCPUs
//	m.Pause(); s, _ := m.Snapshot(dir, parent); m.Resume() // snapshot.go
//	reason, err := m.Wait()     // ExitReset when the guest reboots/halts
//
// Device API (for vmm/virtio and others), all before Start:
//
//   - m.Memory() bus.Memory: guest RAM (Slice aliases the mapping).
//   - m.IRQ() bus.IRQ: KVM_IRQ_LINE on the in-kernel PIC+IOAPIC. The MP
//     table declares ISA lines 0-23 edge-triggered, active high: signal an
//     interrupt as SetIRQ(line, true) then SetIRQ(line, false), or hold the
//     level while pending (each rising edge is one interrupt).
//   - m.AddMMIO(base, size, dev) / m.AddPIO(port, n, dev): map a device.
//     Reads of unclaimed ports return 0xff, of unclaimed MMIO 0.
//   - m.AddVirtio(attach) allocates the next virtio-mmio slot: a 4 KiB window
//     at 0xd0000000 + i*0x1000 and IRQ 5+i (at most 19 devices), calls
//     attach(slot) for the device, maps it, and appends
//     "virtio_mmio.device=4K@0xd0000000:5" to the kernel command line. A
//     restore must add the same devices in the same order.
//   - m.AddHooks(name, Hooks{Pause, Resume, Save, Restore, Close}): lifecycle
//     callbacks. Pause runs after every vCPU has left KVM_RUN, Resume before
//     they re-enter; Save's value is JSON-encoded into the snapshot under
//     name and handed back (raw JSON) to Restore before the vCPUs start.
//     Close runs once, when the machine is closed: after every vCPU
//     goroutine has returned and before guest RAM is unmapped, also for a
//     machine that never started. m.Close() returns after all of that;
//     control calls on a closed machine return ErrEnded.
//
// Exits: PIO and MMIO exits are dispatched on the vCPU's goroutine to the
// device owning the address; devices do their own locking.
//
// # Threads and events
//
// One goroutine per vCPU, locked to its OS thread. Control (Pause, Resume,
// Save, Stop) reaches a vCPU as an event on its channel, with the reply on a
// per-request channel; to get the vCPU out of KVM_RUN the controller sets
// kvm_run.immediate_exit and sends the thread a dedicated real-time signal
// (tgkill, signal 40). KVM_RUN then returns EINTR, having completed any
// pending MMIO/PIO, so a parked vCPU's state is consistent for Save.
//
// Lock order: Machine.ctl (control calls, one at a time) → vCPU event
// channels → device locks. Exit dispatch takes no machine lock: the device
// maps are immutable after Start.
//
// The process that runs one machine (`sandfs vmm`), its control, its
// confinement and the daemon's client are package vmm/vmmproc.
package vmm
