// Package labtest boots a real guest with every sandfs virtio device
// (blk over a COW overlay of the template image, net on a tap, rng, vsock)
// and checks them end to end from inside the guest. Its test binary is
// also the guest's /init. It needs /dev/kvm, the kernel (build/vmlinuz)
// and the template (build/templates/base.ext4): run it in the lab
// (bin/sandfs lab, make test-lab); elsewhere it skips.
package labtest
