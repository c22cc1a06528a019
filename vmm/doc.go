// Package vmm is the sandfs virtual machine monitor: one KVM VM per
// process (`sandfs vmm`), driven by the daemon over a unix socket.
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
// # Process model and control protocol
//
// The daemon runs one `sandfs vmm -config FILE` process per sandbox
// (vmm.Launch starts it and returns a *Process). The process reads its
// Config (JSON), builds the machine, and serves a line protocol on the
// control socket it inherits as fd 3 (a listening unix socket). One request
// per line, in the ctl message grammar (package msg: blanks between words,
// single quotes, at most 4 KiB; verbs in controlVerbs, control.go), one
// reply line per request:
//
//	request          reply
//	status           ok <state> cpus=<n> mem=<bytes> pid=<pid>   state: running|paused|ended:<reason>
//	pause            ok                 vCPUs parked, devices quiesced
//	resume           ok
//	save <dir>       ok <dir>           paused only: <dir>/state.json + <dir>/mem
//	stop             ok                 the process then exits
//	(any failure)    err <ERRNO> <verb>: <reason>    e.g. err EINVAL ctl: unknown verb "bogus"
//
// The errno travels as its name (msg.Line); the client returns a
// *msg.Error with errno and text (msg.ParseLine), so the daemon maps it
// like any other error.
//
// The process's exit status says why it ended: 0 stop, 10 guest reset
// (reboot, panic with panic=-1, triple fault), 11 poweroff, 12 crash,
// 1 VMM error (its text is the last "vmm: " line of stderr), 2 usage; it
// also logs "vmm: exit reason=<reason>" last. A seccomp violation kills it
// with SIGSYS. vmm.Process.Wait returns (ExitReason, error) from these.
//
// # Client (the daemon's side)
//
//	p, err := vmm.Launch(ctx, vmm.Config{Kernel: k, MemBytes: 256 << 20, CPUs: 1,
//		Disks: ..., Vsock: ..., RNG: true,
//		Socket: dir + "/vmm.sock", Console: dir + "/console", LogFile: dir + "/vmm.log",
//		Jail: vmm.JailConfig{Namespaces: true, Seccomp: true, Cgroup: "sandfs/" + id,
//			Root: dir + "/root", Work: dir + "/work", UID: uid, GID: uid}})
//	p.Pause(ctx); p.Save(ctx, dir+"/work/snap"); p.Resume(ctx); st, _ := p.Status(ctx)
//	p.Stop(ctx)                 // "stop", then SIGKILL to the group after the deadline (5 s default)
//	<-p.Done(); reason, err := p.Wait(); p.Err(); p.Pid(); p.Kill()
//
// A restore is Launch with Config.Restore = snapDir (and StartPaused to
// keep it paused): same devices, same order.
//
// # Confinement
//
// Launch: namespaces (mount, PID, IPC, network, UTS), an empty
// environment, the cgroup (confine.go, package cgroup). The process: its
// root on Jail.Root, entered before it opens anything there (jail.go);
// then, once the machine exists, the uid drop and the seccomp filter
// (confine.go, seccomp.go). docs/vmm.md, "The jail", lists what a
// compromised VMM can still reach.
package vmm
