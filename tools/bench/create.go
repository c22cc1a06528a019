package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"sandfs/snapshot"
)

// createResult is the create-from-snapshot figures of one memory size.
type createResult struct {
	mem     uint64
	boot    time.Duration // the template's cold boot to its agent
	total   sample        // copy + running + agent
	running sample        // Launch alone: restore to vCPUs running
	agent   sample        // running to the agent answering
	use     memUse        // an idle restored sandbox
}

// benchCreate restores t's snapshot n times, one after another, each to
// its agent answering; the first sandbox is also measured idle for
// memory.
func (r *run) benchCreate(ctx context.Context, t *template) (*createResult, error) {
	res := &createResult{mem: t.mem, boot: t.boot}
	for i := 0; i < r.n; i++ {
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
		head: []string{"guest RAM", "VMM process PSS", "guest RAM mapping PSS", "guest private pages", "**PSS beyond guest RAM + private guest pages**"}}
	for _, r := range rs {
		t.add(fmt.Sprintf("%d MiB", r.mem>>20), ms(r.total.median()), r.total.spread(), ms(r.running.median()), ms(r.agent.median()), ms(r.boot))
		m.add(fmt.Sprintf("%d MiB", r.mem>>20), kib(r.use.pss), kib(r.use.guestPSS), kib(r.use.guestAnon), "**"+kib(r.use.beyond())+"**")
	}
	if len(rs) >= 2 {
		lo, hi := rs[0], rs[len(rs)-1]
		t.notes = append(t.notes, fmt.Sprintf("**%d MiB / %d MiB: create %s, restore to running %s** (flat: within 10%% is ≤ 1.10).",
			hi.mem>>20, lo.mem>>20, ratio(hi.total.median(), lo.total.median()), ratio(hi.running.median(), lo.running.median())))
	}
	m.notes = append(m.notes, "The guest RAM mapping is the snapshot's mem file, MAP_PRIVATE: its page cache is shared by every sandbox restored from it, so it is left out of one more sandbox's cost, except for the pages the guest copied (private, anonymous).")
	return []*table{t, m}
}
