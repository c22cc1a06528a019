// Package probe is the one answer to "can this host run sandfs guests
// natively?". Everything that must decide asks it: make run and make test
// (through `sandfs probe`), the daemon at start-up, the lab (KVM or TCG
// acceleration) and the test helpers in sandfs/test/testenv. Nothing else
// decides by whether /dev/kvm opens: a PVM /dev/kvm (kvm_pvm) opens and
// creates VMs but runs a standard guest kernel at emulation speed.
//
// The decision is split in two so that it can be tested over recorded
// hosts: Gather reads the facts of this host (the device, kvm_pvm, the CPU's
// vmx/svm flags, the KVM capabilities the VMM needs, a timed test guest) and
// Decide, a pure function, turns Facts into a Verdict with a one-line reason.
package probe
