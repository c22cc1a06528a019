package e2b

import (
	"sync"
	"syscall"

	"sandfs/ctl/msg"
)

// Caps on code contexts: each is a python process in the guest and a
// tree connection in the daemon, so neither a sandbox nor a key may pile
// them up.
const (
	maxContextsPerSandbox = 16
	maxContextsPerKey     = 64
)

// interps are the code contexts of every sandbox. A context leaves by
// DELETE /contexts/{id}, by its sandbox's kill, or when a request finds
// its sandbox gone (drop).
type interps struct {
	mu    sync.Mutex                         // guards m and byKey
	m     map[string]map[string]*codeContext // sandbox id → context id →
	byKey map[string]int                     // keyID → its contexts, all sandboxes
}

func (t *interps) get(sb, id string) *codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[sb][id]
}

// add puts cc in sandbox sb's contexts unless one of its id is there
// (then that one is had) or a cap is reached (EAGAIN, whose text names
// it: 429).
func (t *interps) add(sb string, cc *codeContext) (had *codeContext, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m, t.byKey = map[string]map[string]*codeContext{}, map[string]int{}
	}
	if had := t.m[sb][cc.ID]; had != nil {
		return had, nil
	}
	if len(t.m[sb]) >= maxContextsPerSandbox {
		return nil, msg.Errorf(syscall.EAGAIN, "contexts: sandbox %q has %d contexts, the most allowed; remove one", sb, maxContextsPerSandbox)
	}
	if t.byKey[cc.owner] >= maxContextsPerKey {
		return nil, msg.Errorf(syscall.EAGAIN, "contexts: the API key has %d contexts, the most allowed; remove one", maxContextsPerKey)
	}
	if t.m[sb] == nil {
		t.m[sb] = map[string]*codeContext{}
	}
	t.m[sb][cc.ID] = cc
	t.byKey[cc.owner]++
	return nil, nil
}

// remove takes cc out of sb's contexts if it is still there.
func (t *interps) remove(sb string, cc *codeContext) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[sb][cc.ID] == cc {
		t.removeLocked(sb, cc)
	}
}

func (t *interps) removeLocked(sb string, cc *codeContext) {
	delete(t.m[sb], cc.ID)
	if len(t.m[sb]) == 0 {
		delete(t.m, sb)
	}
	if t.byKey[cc.owner]--; t.byKey[cc.owner] <= 0 {
		delete(t.byKey, cc.owner)
	}
}

func (t *interps) list(sb string) []*codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*codeContext
	for _, cc := range t.m[sb] {
		out = append(out, cc)
	}
	return out
}

// drop forgets context id of sandbox sb ("" for all of them) and closes
// their connections.
func (t *interps) drop(sb, id string) {
	t.mu.Lock()
	var gone []*codeContext
	for cid, cc := range t.m[sb] {
		if id == "" || cid == id {
			gone = append(gone, cc)
			t.removeLocked(sb, cc)
		}
	}
	t.mu.Unlock()
	for _, cc := range gone {
		cc.slotMu.Lock()
		cc.gone = true
		cc.slotMu.Unlock()
		cc.closeConn()
	}
}
