# sandfs build and test entry points. See README.md and docs/lab.md.
#
#   make test    build everything (binaries, kernel, template), run host tests,
#                the fuzz targets (make fuzz, FUZZTIME each), then the lab-only
#                test binaries inside one lab boot, then the E2B SDK suite
#   make run     start sandfs (natively, or inside the lab where the host
#                cannot run guests) and mount the tree at /mnt/sandfs
GO      ?= go
export CGO_ENABLED := 0

.PHONY: build kernel kernel-6.12 template lab probe test test-unit test-lab test-e2b test-netmany bench-e2b fuzz run clean qemu-bundle bench bench-snapshots bench-worlds bpf bpf-check bench-netpolicy bench-net

# Every command lives under tools/: tools/sandfs, tools/sandfs-init (the
# guest agent), tools/sandfs-vmm (the VMM process alone, which the daemon
# runs per sandbox from beside bin/sandfs), tools/lab, tools/kernel,
# tools/template.
build:
	$(GO) build -o bin/sandfs ./tools/sandfs
	$(GO) build -o bin/sandfs-init ./tools/sandfs-init
	$(GO) build -o bin/sandfs-vmm ./tools/sandfs-vmm

# build/vmlinuz: the one kernel (guest and lab), Linux 6.1. Cached; second
# run instant.
kernel:
	tools/kernel/build.sh

# build/vmlinuz-6.12: a newer host kernel for make test's lab run of
# test/lab-packages-6.12 (only the tests need it). Cached as kernel.
kernel-6.12:
	tools/kernel/build.sh 6.12

# build/templates/base.ext4 (installs bin/sandfs-init as /sbin/init).
template: build
	tools/template/build.sh base

# Everything `sandfs lab -- CMD` needs.
lab: build kernel

probe: build
	bin/sandfs probe

# Host tests. -race needs cgo, so this target turns it back on.
# test/makerun's tests start labs of their own (run.sh's lab path), where
# the nested emulation's faults fail a test as they do in the lab stage:
# its binary runs through the lab stage's runner (tools/lab/run-tests.sh),
# which reruns a test that failed with a lab fault's signature once.
test-unit:
	CGO_ENABLED=1 $(GO) test -race $$($(GO) list ./... | grep -v -x 'sandfs/test/makerun'); rc=$$?; \
	mkdir -p bin/tests && echo "host-makerun.test test/makerun" > bin/tests/host-manifest && \
	CGO_ENABLED=1 $(GO) test -race -c -o bin/tests/host-makerun.test ./test/makerun && \
	SANDFS_TEST_ROOT=$(CURDIR) SANDFS_TEST_STAGE=host SANDFS_TEST_DIGEST=$(CURDIR)/bin/tests/host-digest.txt LAB_KALLSYMS=/dev/null \
		bash tools/lab/run-tests.sh $(CURDIR)/bin/tests/host-manifest; mrc=$$?; \
	[ $$rc = 0 ] && [ $$mrc = 0 ]

# Each fuzz target for FUZZTIME (9 x 10 s, about 2 minutes with the builds),
# one worker per core. A failing input is written to the package's
# testdata/fuzz/<Target>/ (commit it: it becomes a seed). test/fuzz.sh
# says when a target runs twice.
FUZZTIME ?= 10s
FUZZ_TARGETS = ./ctl/msg:FuzzSplit ./ctl:FuzzParse ./ctl:FuzzSize ./fs/ninep:FuzzFrames ./guest:FuzzParseMessage ./snapshot:FuzzDecode ./vmm:FuzzDecodeState ./netpolicy:FuzzParse ./fs/client:FuzzParseEvent
fuzz:
	GO=$(GO) test/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# netpolicy's eBPF object (netpolicy/egress_bpfel.{o,go}) from
# netpolicy/bpf/egress.c, by bpf2go (go.mod's tool line) with Debian's
# clang 14; installs clang, llvm and libbpf-dev with apt when missing.
# The outputs are committed; bpf-check rebuilds them and fails if they
# differ from the committed ones (the build is reproducible: no paths).
BPF_OUT = netpolicy/egress_bpfel.o netpolicy/egress_bpfel.go
bpf:
	@if ! command -v clang >/dev/null || ! command -v llvm-strip >/dev/null || [ ! -e /usr/include/bpf/bpf_helpers.h ]; then \
		echo "make bpf: installing clang llvm libbpf-dev"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang llvm libbpf-dev; \
	fi
	$(GO) generate ./netpolicy

# Set's cost (1 vs 1000 rules, one run) and the tries' memory (docs/network.md).
bench-netpolicy:
	$(GO) test -run '^$$' -bench '^BenchmarkSet$$' -benchtime 50x ./netpolicy
	$(GO) test -run '^$$' -bench '^BenchmarkFlow$$' -benchtime 3x ./netpolicy

bpf-check: bpf
	@git diff --exit-code --stat -- $(BPF_OUT) || { echo "make bpf-check: $(BPF_OUT) differ from the committed build (commit them)"; exit 1; }

# Lab test binaries (packages in test/lab-packages) in one lab boot.
test-lab: lab template
	tools/lab/test-lab.sh

# test/netlab's TestNetworkMany (20 guests, each its own policy) alone, in
# the lab (`make test` runs it with the rest of test/netlab).
test-netmany: build kernel template
	CGO_ENABLED=0 go test -c -o bin/tests/netmany.test ./test/netlab
	bin/sandfs lab -C /opt/sandfs/test/netlab -- /opt/sandfs/bin/tests/netmany.test -test.v -test.run 'TestNetworkMany$$'

# The E2B SDK suite (test/e2b: the real npm `e2b` package against sandfs
# serve --e2b, in the lab or natively; docs/e2b.md).
test-e2b: build kernel template
	test/e2b/run.sh

# The egress filter's benchmark of docs/network.md (issue 13), in the lab:
# an allowed guest flow with the filter and with none; its report to
# build/bench-net.md.
bench-net: build kernel template
	bin/sandfs lab -- /opt/sandfs/bin/sandfs bench net > build/bench-net.md

# The E2B benchmark of docs/e2b.md: each operation through the SDK and
# through the tree, against one daemon, medians of BENCH_N rounds.
bench-e2b: build kernel template
	test/e2b/run.sh bench

# The host probe decides once: where guests run natively the host stage
# runs every test, guests included; elsewhere the guest tests hand off
# (skip) on the host and the lab stage runs test/lab-packages in one lab
# boot, then test/lab-packages-6.12 in one on the newer host kernel. Every
# stage runs; the target fails if any failed.
test: build kernel kernel-6.12 template bpf-check
	@rm -f bin/tests/lab-digest.txt bin/tests/lab612-digest.txt bin/tests/host-digest.txt; verdict=$$(bin/sandfs probe); echo "== make test: host probe: $$verdict"; \
	echo "== make test: host tests (go test -race ./...)"; \
	$(MAKE) --no-print-directory test-unit; unit=$$?; \
	echo "== make test: fuzz targets ($(FUZZTIME) each)"; \
	$(MAKE) --no-print-directory fuzz; fuzzrc=$$?; \
	if [ "$${verdict%%:*}" = native ]; then \
		echo "== make test: guests ran natively in the host stage; no lab stage"; labrc=0; \
	else \
		echo "== make test: lab tests (test/lab-packages, one lab boot)"; \
		tools/lab/test-lab.sh; labrc=$$?; \
		echo "== make test: lab tests on Linux 6.12 (test/lab-packages-6.12, one lab boot)"; \
		SANDFS_LAB_PACKAGES=test/lab-packages-6.12 SANDFS_LAB_FLAGS="-kernel build/vmlinuz-6.12" SANDFS_LAB_DIGEST=bin/tests/lab612-digest.txt \
			tools/lab/test-lab.sh || labrc=1; \
	fi; \
	echo "== make test: E2B SDK suite (test/e2b)"; \
	test/e2b/run.sh; e2brc=$$?; \
	if [ -s bin/tests/host-digest.txt ]; then echo "== make test: test/makerun's digest (failures, reruns)"; cat bin/tests/host-digest.txt; fi; \
	if [ -s bin/tests/lab-digest.txt ]; then echo "== make test: the lab stage's digest (failures, reruns)"; cat bin/tests/lab-digest.txt; fi; \
	if [ -s bin/tests/lab612-digest.txt ]; then echo "== make test: the Linux 6.12 lab stage's digest"; cat bin/tests/lab612-digest.txt; fi; \
	echo "== make test: host tests exit $$unit, fuzz exit $$fuzzrc, lab tests exit $$labrc, e2b exit $$e2brc"; \
	[ $$unit = 0 ] && [ $$fuzzrc = 0 ] && [ $$labrc = 0 ] && [ $$e2brc = 0 ]

run: build kernel template
	tools/lab/run.sh

# build/qemu-bundle: the host's qemu-system-x86_64 with its libraries, loader
# and microvm firmware, runnable inside the lab (docs/vmm.md, Figures).
qemu-bundle:
	tools/lab/qemu-bundle.sh build/qemu-bundle

# The VMM benchmark of docs/vmm.md: sandfs vmm vs QEMU microvm, in the lab.
BENCH_N ?= 5
bench: build kernel qemu-bundle
	bin/sandfs lab -- /opt/sandfs/bin/sandfs vmm bench -n $(BENCH_N) -qemu /opt/sandfs/build/qemu-bundle/qemu

# The snapshot benchmark of docs/snapshots.md (issue 11), in the lab, its
# scratch (-dir) on a disk image on the host's disk (the lab's tmpfs /tmp
# cannot hold the 1 GiB dirty size), emptied first (a run the lab's faults
# ended leaves its scratch there, which the next run's first snapshot met:
# "snapshot exists"): progress on stderr, the tables to
# docs/bench/snapshots.md (only if the run succeeds). A complete run takes
# 5-15 minutes; the lab is ended after 40 (a lab whose own kernel wedged,
# 2026-12-05, held the run silent until ended by hand; its end dumps the
# lab's CPUs).
bench-snapshots: build kernel template qemu-bundle
	l0=$$(cut -d' ' -f1-3 /proc/loadavg); \
	bin/sandfs lab -timeout 40m -mem 7168 -disk $${SANDFS_CACHE:-/var/cache/sandfs}/lab/bench.ext4 -state-size 24 -- sh -c \
		'mount -o discard /dev/vda /mnt && rm -rf /mnt/sbench && exec /opt/sandfs/bin/sandfs bench snapshots -dir /mnt/sbench -n $(BENCH_N) -qemu /opt/sandfs/build/qemu-bundle/qemu' > build/bench-snapshots.md && \
	printf 'The host running the lab (outside it): load average %s at the start, %s at the end.\n' "$$l0" "$$(cut -d' ' -f1-3 /proc/loadavg)" >> build/bench-snapshots.md
	mkdir -p docs/bench && mv build/bench-snapshots.md docs/bench/snapshots.md
	bin/sandfs bench plot docs/bench/snapshots.md docs/bench

# The worlds benchmark of docs/worlds.md (issue 12), in the lab: /workspace
# against the guest's ext4 disk and QEMU's virtio-9p; progress on stderr, the
# table to docs/bench/worlds.md (only if the run succeeds).
WORLDS_BENCH ?= -dirs 3 -files 40 -big 16 -creates 50 -writes 40
bench-worlds: build kernel template qemu-bundle
	l0=$$(cut -d' ' -f1-3 /proc/loadavg); \
	bin/sandfs lab -timeout 60m -- /opt/sandfs/bin/sandfs bench worlds $(WORLDS_BENCH) -qemu /opt/sandfs/build/qemu-bundle/qemu > build/bench-worlds.md && \
	printf 'The host running the lab (outside it): load average %s at the start, %s at the end.\n' "$$l0" "$$(cut -d' ' -f1-3 /proc/loadavg)" >> build/bench-worlds.md
	mkdir -p docs/bench && mv build/bench-worlds.md docs/bench/worlds.md

clean:
	rm -rf bin build
