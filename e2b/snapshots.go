package e2b

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-chi/chi/v5"

	"sandfs/ctl/msg"
)

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// snapshot is POST /sandboxes/{id}/snapshots {"name"?}: `snapshot
// [name]` on the sandbox's ctl; the reply of the same open is its name.
// Sandbox.create(name) then makes a sandbox from it (`new from=`).
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "snapshot: "+err.Error())
		return
	}
	m := "snapshot"
	if req.Name != "" {
		m += " " + msg.Quote(req.Name)
	}
	ctl, errPath := sandboxCtl(cl.rec.ID)
	name, err := ctlMsg(cl.c, ctl, errPath, m)
	if err != nil {
		s.treeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo{SnapshotID: name, Names: []string{name}})
}

// listSnapshots is GET /snapshots?sandboxID=&limit=&nextToken=: the
// snapshots whose info the key may read (its own), oldest first.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	q := r.URL.Query()
	ents, err := cl.c.ReadDir("snapshots")
	if err != nil {
		s.treeError(w, err)
		return
	}
	out := []snapshotInfo{}
	for _, e := range ents {
		b, err := cl.c.ReadFile("snapshots/" + e.Name + "/info")
		if err != nil {
			continue // another owner's (EACCES), or removed meanwhile
		}
		if id := q.Get("sandboxID"); id != "" && !strings.Contains(" "+string(b), " sandbox="+id+" ") {
			continue
		}
		out = append(out, snapshotInfo{SnapshotID: e.Name, Names: []string{e.Name}})
	}
	start, _ := strconv.Atoi(q.Get("nextToken"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 100
	}
	out = out[min(max(start, 0), len(out)):]
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(start+limit))
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSnapshot is DELETE /templates/{id}: `rm` on the snapshot's ctl.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	id := chi.URLParam(r, "id")
	if !plainName(id) {
		writeError(w, http.StatusNotFound, "snapshot "+strconv.Quote(id)+" not found")
		return
	}
	err := cl.c.WriteMsg("snapshots/"+id+"/ctl", "rm", "err")
	switch {
	case errors.Is(err, syscall.ENOENT):
		writeError(w, http.StatusNotFound, "snapshot "+strconv.Quote(id)+" not found")
	case err != nil:
		s.treeError(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
