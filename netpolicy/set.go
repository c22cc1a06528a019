package netpolicy

import (
	"fmt"

	"github.com/cilium/ebpf"

	"sandfs/ctl/msg"
)

// Set puts p's default and address rules in force, live and atomically:
// no reattaching, and every packet is judged by the old policy or the
// new one, never a mix. The maps hold two generations of rules; Set
// brings the one not in force from what it holds to p (a diff: only
// changed rules are written), then switches generations with one store
// to the config map. The program keeps no connection state, so the next
// packet of every flow, new or established, sees the change. Domains
// are not in the maps: the sandbox's resolver opens their addresses as
// allow rules (package sbnet).
//
// On error the policy in force is unchanged; the generation Set was
// writing is cleared first by the next Set.
func (f *Filter) Set(p *Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := 1 - f.gen
	if err := f.write(next, p); err != nil {
		f.held[next] = nil
		return msg.Errorf(msg.Errno(err), "netpolicy: set: %v", err)
	}
	f.held[next] = p
	if err := f.switchTo(next, p.Default); err != nil {
		return msg.Errorf(msg.Errno(err), "netpolicy: set: %v", err)
	}
	f.gen = next
	return nil
}

// write makes generation gen's rules p's.
func (f *Filter) write(gen uint8, p *Policy) error {
	if f.held[gen] == nil {
		if err := f.clear(gen); err != nil {
			return err
		}
		f.held[gen] = &Policy{}
	}
	old, now := ruleSet(f.held[gen].Rules), ruleSet(p.Rules)
	for r := range old {
		if !now[r] {
			if err := f.del(gen, r); err != nil {
				return err
			}
		}
	}
	for r := range now {
		if !old[r] {
			if err := f.put(gen, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func ruleSet(rules []Rule) map[Rule]bool {
	m := make(map[Rule]bool, len(rules))
	for _, r := range rules {
		m[r] = true
	}
	return m
}

// clear deletes generation gen's rules from the four tries.
func (f *Filter) clear(gen uint8) error {
	for _, m := range []*ebpf.Map{f.objs.Allow4, f.objs.Deny4, f.objs.Allow6, f.objs.Deny6} {
		var keys [][]byte
		var k []byte
		var v uint32
		it := m.Iterate()
		for it.Next(&k, &v) {
			if len(k) > 4 && k[4] == gen {
				keys = append(keys, append([]byte(nil), k...))
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("list %s: %w", m, err)
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil {
				return fmt.Errorf("delete from %s: %w", m, err)
			}
		}
	}
	return nil
}
