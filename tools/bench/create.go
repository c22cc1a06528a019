package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"sandfs/snapshot"
)

// createResult is the create-from-snapshot figures of one memory size.
type createResult struct {
	mem      uint64
	boot     time.Duration // the template's cold boot to its agent
	total    sample        // copy + running + agent
	running  sample        // Launch alone: restore to vCPUs running
	agent    sample        // running to the agent answering
	use      memUse        // an idle restored sandbox
	save     time.Duration // the template's full snapshot (pause + save)
	snapKiB  int64         // its mem file, allocated
	qemu     *qemuTemplate // nil: no QEMU side
	qemuRun  sample        // QEMU: process start to the vCPUs running after loading the migration file
	qemuLoad sample        // QEMU: migrate-incoming to the vCPUs running
	floor    sample        // the floor process: start to KVM_RUN
	floorPh  string        // its phases, last run
}

// benchCreate restores t's snapshot n times, one after another, each to
// its agent answering; the first sandbox is also measured idle for
// memory. With qt, each sandfs restore is followed by a QEMU restore of
// the same size (interleaved, so that a noisy host slows both alike).
func (r *run) benchCreate(ctx context.Context, t *template, qt *qemuTemplate) (*createResult, error) {
	res := &createResult{mem: t.mem, boot: t.boot, save: t.save, qemu: qt}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(t.snap(), snapshot.MemFile), &st); err == nil {
		res.snapKiB = st.Blocks / 2
	}
	for i := 0; i < r.n; i++ {
		if qt != nil {
			d, load, err := qt.restore(ctx, r.h.kernel)
			if err != nil {
				return nil, fmt.Errorf("qemu restore %d MiB: %w", t.mem>>20, err)
			}
			r.progress("  qemu restore %d MiB #%d: running after %s (load %s)", t.mem>>20, i+1, ms(d), ms(load))
			res.qemuRun = append(res.qemuRun, d)
			res.qemuLoad = append(res.qemuLoad, load)
		}
		fd, fph, err := floorRun(ctx, t.snap())
		if err != nil {
			return nil, err
		}
		r.progress("  floor %d MiB #%d: KVM_RUN after %s (%s)", t.mem>>20, i+1, ms(fd), fph)
		res.floor, res.floorPh = append(res.floor, fd), fph
		s, ph, err := r.h.restore(ctx, t.dir, t.mem, t.snap())
		if err != nil {
			return nil, fmt.Errorf("restore %d MiB: %w", t.mem>>20, err)
		}
		r.progress("  restore %d MiB #%d: copy %s, running %s, agent %s", t.mem>>20, i+1, ms(ph.copy), ms(ph.running), ms(ph.agent))
		res.total = append(res.total, ph.total())
		res.running = append(res.running, ph.running)
		res.agent = append(res.agent, ph.agent)
		if i == 0 {
			time.Sleep(r.idle) // idle: the agent back in its accept loop
			res.use, err = readMemUse(s.p.Pid(), filepath.Join(t.snap(), snapshot.MemFile))
			if err != nil {
				s.close()
				return nil, err
			}
		}
		s.close()
	}
	return res, nil
}

// createTables are the create-from-snapshot and idle-memory tables of
// the results, one row per memory size.
func createTables(rs []*createResult) []*table {
	t := &table{title: "Create from snapshot vs memory size (VMM process, c=1)",
		head: []string{"guest RAM", "create: copy layer + restore + agent answers (median)", "min-max", "restore to vCPUs running (median)", "running to agent answering (median)", "template cold boot to agent"}}
	m := &table{title: "Memory of an idle restored sandbox",
		head: []string{"guest RAM", "VMM process PSS", "guest RAM mapping PSS", "guest private pages", "**PSS beyond guest RAM + private guest pages**", "of the VMM: its binary", "of the VMM: anonymous (Go heap, stacks)", "private beyond guest RAM + private guest pages"}}
	for _, r := range rs {
		t.add(fmt.Sprintf("%d MiB", r.mem>>20), ms(r.total.median()), r.total.spread(), ms(r.running.median()), ms(r.agent.median()), ms(r.boot))
		m.add(fmt.Sprintf("%d MiB", r.mem>>20), kib(r.use.pss), kib(r.use.guestPSS), kib(r.use.guestAnon), "**"+kib(r.use.beyond())+"**", kib(r.use.binPSS), kib(r.use.anonPSS), kib(r.use.uss))
	}
	if len(rs) >= 2 {
		lo, hi := rs[0], rs[len(rs)-1]
		t.notes = append(t.notes, fmt.Sprintf("**%d MiB / %d MiB: create %s, restore to running %s** (flat: within 10%% is ≤ 1.10).",
			hi.mem>>20, lo.mem>>20, ratio(hi.total.median(), lo.total.median()), ratio(hi.running.median(), lo.running.median())))
	}
	m.notes = append(m.notes, "The guest RAM mapping is the snapshot's mem file, MAP_PRIVATE: its page cache is shared by every sandbox restored from it, so it is left out of one more sandbox's cost, except for the pages the guest copied (private, anonymous). The binary's pages are shared by every VMM (and the benchmark, the same binary): the private column counts only the pages no other process maps.")
	out := []*table{t, m}
	if q := qemuTable(rs); q != nil {
		out = append(out, q)
	}
	return append(out, floorTable(rs))
}

// floorTable puts sandfs's restore beside the floor, one row per size.
func floorTable(rs []*createResult) *table {
	t := &table{title: "The floor of a restore: sandfs beside a process that only creates the VM, maps the memory file and loads the saved state",
		head: []string{"guest RAM", "sandfs: restore to vCPUs running (median)", "floor: process start to KVM_RUN (median)", "**sandfs / floor**", "floor phases (last run)"}}
	for _, r := range rs {
		t.add(fmt.Sprintf("%d MiB", r.mem>>20), ms(r.running.median()), ms(r.floor.median()), "**"+ratio(r.running.median(), r.floor.median())+"**", r.floorPh)
	}
	t.notes = append(t.notes, "The floor (`sandfs bench floor DIR`, tools/bench/floor.go) runs in the benchmark's binary (bin/sandfs; the VMM runs bin/sandfs-vmm where make build put it beside, a quarter of its size, so the floor's exec and package inits cost more than the VMM's): open /dev/kvm, KVM_CREATE_VM with irqchip and PIT, one MAP_PRIVATE mapping of the snapshot's mem as the memory slots, the vCPUs, the saved PIT, clock, irqchips and vCPU state (CPUID, MP state, registers, xsave, xcrs, debug registers, LAPIC, MSRs, events) through vmm/kvm, then KVM_RUN; no devices, control socket, console or jail. Both are timed from the process's start (fork and exec included) to running.")
	return t
}

// qemuTable puts sandfs's restore beside QEMU's, one row per size.
func qemuTable(rs []*createResult) *table {
	t := &table{title: "sandfs and QEMU side by side: snapshot and restore of the booted template (same kernel, memory, disk image, 1 vCPU)",
		head: []string{"guest RAM", "sandfs: restore to vCPUs running (median)", "QEMU: -incoming defer, migrate-incoming exec:cat, cont, to RESUME (median)", "of which migrate-incoming to RESUME", "**sandfs / QEMU**", "sandfs create to agent answering / QEMU restore", "sandfs full snapshot (pause + save) / size", "QEMU stop + migrate exec:cat > file / size"}}
	for _, r := range rs {
		if r.qemu == nil {
			continue
		}
		t.add(fmt.Sprintf("%d MiB", r.mem>>20), ms(r.running.median()), ms(r.qemuRun.median()), ms(r.qemuLoad.median()),
			"**"+ratio(r.running.median(), r.qemuRun.median())+"**", ratio(r.total.median(), r.qemuRun.median()),
			ms(r.save)+" / "+mib(r.snapKiB<<10), ms(r.qemu.save)+" / "+mib(r.qemu.migBytes))
	}
	if len(t.rows) == 0 {
		return nil
	}
	t.notes = append(t.notes, "Both from the process's start: sandfs to `Launch` returning with the vCPUs running (the control socket answering after the restore), QEMU to its RESUME event after loading the migration stream. QEMU's guest has no vsock (the lab's kernel has no vhost-vsock), so its agent cannot answer: the agent column is sandfs's full create (layer copy and agent included) over QEMU's restore to running. QEMU reuses one disk image (no copy); sandfs copies its disk layer per create.")
	return t
}
