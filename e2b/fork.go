package e2b

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// forkResult is E2B's SandboxForkResult: a sandbox or an error.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

// maxFork is the tree's limit of clones per `clone`.
const maxFork = 64

// fork is POST /sandboxes/{id}/fork {"count"?, "timeout"?}: `clone N`
// on the sandbox's ctl (a snapshot, then N sandboxes restored from it,
// all or nothing); the reply of the same open is their ids, one a line.
// Each gets the parent's metadata and envVars, a token of its own and
// the timeout given (else 300 s).
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	var req struct {
		Count   int  `json:"count"`
		Timeout *int `json:"timeout"`
	}
	if err := decode(r, &req); err != nil || req.Count < 0 || req.Count > maxFork {
		writeError(w, http.StatusBadRequest, "fork: want {\"count\": 1.."+strconv.Itoa(maxFork)+"}")
		return
	}
	count := max(req.Count, 1)
	timeout := 300
	if req.Timeout != nil && *req.Timeout >= 0 {
		timeout = *req.Timeout
	}
	ctl, errPath := sandboxCtl(cl.rec.ID)
	reply, err := ctlMsg(cl.c, ctl, errPath, "clone "+strconv.Itoa(count))
	if err != nil {
		s.treeError(w, err)
		return
	}
	s.adoptSnaps(cl, cl.rec.ID)
	out := []forkResult{}
	for _, id := range strings.Fields(reply) {
		rec := &Record{
			ID: id, Owner: cl.rec.Owner, Template: cl.rec.Template, Metadata: cl.rec.Metadata,
			Envs: cl.rec.Envs, Token: newToken(), Started: time.Now().UTC(),
		}
		if err := s.reg.Put(rec); err != nil {
			s.log.Error("e2b: registry: " + err.Error())
		}
		c, e := sandboxCtl(id)
		if err := cl.c.WriteMsg(c, "timeout "+strconv.Itoa(timeout), e); err != nil {
			out = append(out, forkResult{Error: &apiError{Code: httpStatus(err), Message: err.Error()}})
			continue
		}
		sj := sandboxOf(rec)
		out = append(out, forkResult{Sandbox: &sj})
	}
	writeJSON(w, http.StatusCreated, out)
}
