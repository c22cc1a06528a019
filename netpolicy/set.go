package netpolicy

import (
	"fmt"

	"github.com/cilium/ebpf"

	"sandfs/ctl/msg"
)

// Set makes the maps hold p's default and address rules, live: no
// reattaching, and the next packet sees the change (new connections and
// established ones alike: the program keeps no connection state). The
// change is applied as a diff against the current contents, in an order
// that closes before it opens:
//
//  1. a default that becomes deny, 2. new deny rules, 3. removed allow
//     rules, 4. new allow rules, 5. removed deny rules, 6. a default that
//     becomes allow.
//
// It is not one atomic step: a packet in the middle of a Set may see
// some of the new rules and not others (an atomic swap through a
// map-in-map is a later step; docs/network.md). Domains are not yet
// enforced (they need the resolver). On error the maps may hold a mix;
// Set again to repair.
func (f *Filter) Set(p *Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil { // first Set, or the last one failed halfway
		if err := f.clear(); err != nil {
			return msg.Errorf(msg.Errno(err), "netpolicy: set: %v", err)
		}
		f.cur = &Policy{Default: Deny}
	}
	old := f.cur
	oldSet, newSet := ruleSet(old.Rules), ruleSet(p.Rules)
	added := func(r Rule) bool { return !oldSet[r] }
	removed := func(r Rule) bool { return !newSet[r] }
	steps := []func() error{
		func() error {
			return f.when(p.Default == Deny && old.Default != Deny, func() error { return f.setDefault(Deny) })
		},
		func() error { return f.each(p.Rules, Deny, added, f.put) },
		func() error { return f.each(old.Rules, Allow, removed, f.del) },
		func() error { return f.each(p.Rules, Allow, added, f.put) },
		func() error { return f.each(old.Rules, Deny, removed, f.del) },
		func() error {
			return f.when(p.Default == Allow && old.Default != Allow, func() error { return f.setDefault(Allow) })
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			f.cur = nil // unknown: the next Set clears the maps first
			return msg.Errorf(msg.Errno(err), "netpolicy: set: %v", err)
		}
	}
	f.cur = p
	return nil
}

func (f *Filter) when(cond bool, do func() error) error {
	if !cond {
		return nil
	}
	return do()
}

// each applies do to the rules of verdict v for which pick holds.
func (f *Filter) each(rules []Rule, v Verdict, pick func(Rule) bool, do func(Rule) error) error {
	for _, r := range rules {
		if r.Verdict == v && pick(r) {
			if err := do(r); err != nil {
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

// clear empties the four tries and sets default deny.
func (f *Filter) clear() error {
	if err := f.setDefault(Deny); err != nil {
		return err
	}
	for _, m := range []*ebpf.Map{f.objs.Allow4, f.objs.Deny4, f.objs.Allow6, f.objs.Deny6} {
		var keys [][]byte
		var k []byte
		it := m.Iterate()
		var v uint32
		for it.Next(&k, &v) {
			keys = append(keys, append([]byte(nil), k...))
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
