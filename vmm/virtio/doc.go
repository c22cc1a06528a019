// Package virtio implements the virtio-mmio transport (virtio 1.x, §4.2,
// "version 2" registers) and split virtqueues (§2.7) for the sandfs VMM.
// Device types live in subpackages (blk, net, rng, vsock); each implements
// Device and is wrapped by one Transport, which is the bus.MMIODevice the
// machine maps at the slot's base.
//
// Guest memory is reached only through bus.Memory and interrupts only
// through bus.IRQ, so everything here is unit-testable without KVM (see
// package virtiotest, a driver-side harness over a []byte).
//
// Threads. Register accesses come from vCPU goroutines (ReadMMIO/WriteMMIO).
// A queue notification only kicks the device (Device.Notify must not block);
// the device's own goroutine pops chains, does the I/O and pushes used
// entries. Slow I/O never runs on a vCPU.
//
// Interrupts. The virtio-mmio line is signalled as an edge, a rising then a
// falling level (what KVM's irqfd does for Firecracker), after
// InterruptStatus has been updated; the guest reads InterruptStatus and acks
// it. Because the line is never left high, the in-kernel IOAPIC needs no EOI
// handshake from us, whichever trigger mode the guest programmed. An
// interrupt not acknowledged within a second is signalled again, each
// second until it is (repeat.go), as a level-triggered line would stay
// asserted: a lost edge does not stall a queue for good.
//
// Pause and save. Device goroutines wrap every batch that touches guest
// memory or queue state in Transport.Begin/End. Transport.Pause waits for
// the batches in flight and blocks new ones until Resume, so that a Save
// between the two sees queue indices consistent with guest RAM.
//
// Lock order: Transport.mu (registers) → device locks. Device goroutines
// never take Transport.mu; Interrupt, Fail and ConfigChanged use atomics
// only, so Device.Reset (called under Transport.mu) can wait for them. Transport.work
// (the pause gate) is taken by device goroutines before their own locks.
package virtio
