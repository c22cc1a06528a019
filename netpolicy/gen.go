package netpolicy

// The eBPF object is built from bpf/egress.c by bpf2go (cilium/ebpf, pinned
// in go.mod's tool line) with Debian's clang: `make bpf` runs this line;
// the outputs (egress_bpfel.go, egress_bpfel.o) are committed.
//go:generate go tool bpf2go -cc clang -target bpfel -no-global-types egress bpf/egress.c -- -O2 -Wall -Werror -I/usr/include/x86_64-linux-gnu
