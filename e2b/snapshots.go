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
	if err := s.reg.PutSnap(name, cl.rec.Owner); err != nil {
		s.log.Error("e2b: registry: " + err.Error())
	}
	writeJSON(w, http.StatusCreated, snapshotInfo{SnapshotID: name, Names: []string{name}})
}

// adoptSnaps records as the key's every snapshot of its sandbox id that
// no key owns yet (the one `clone` leaves, whose name no reply gives).
func (s *Server) adoptSnaps(cl call, id string) {
	ents, err := cl.c.ReadDir("sandboxes/" + id + "/snapshots")
	if err != nil {
		s.log.Warn("e2b: snapshots of "+id, "err", err)
		return
	}
	for _, e := range ents {
		if s.reg.SnapOwner(e.Name) == "" {
			if err := s.reg.PutSnap(e.Name, keyID(cl.key)); err != nil {
				s.log.Error("e2b: registry: " + err.Error())
			}
		}
	}
}

// ownSnap reports whether name is a snapshot the key took.
func (s *Server) ownSnap(cl call, name string) bool {
	return plainName(name) && s.reg.SnapOwner(name) == keyID(cl.key)
}

// listSnapshots is GET /snapshots?sandboxID=&limit=&nextToken=: the
// tree's snapshots the key took (the registry's), oldest first.
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
		if !s.ownSnap(cl, e.Name) {
			continue
		}
		if id := q.Get("sandboxID"); id != "" {
			b, err := cl.c.ReadFile("snapshots/" + e.Name + "/info")
			if err != nil || !strings.Contains(" "+string(b), " sandbox="+id+" ") {
				continue // removed meanwhile, or another sandbox's
			}
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

// deleteSnapshot is DELETE /templates/{id}: `rm` on the snapshot's ctl,
// for a snapshot the key took (any other name: 404).
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	id := chi.URLParam(r, "id")
	if !s.ownSnap(cl, id) {
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
		if err := s.reg.DeleteSnap(id); err != nil {
			s.log.Error("e2b: registry: " + err.Error())
		}
		w.WriteHeader(http.StatusNoContent)
	}
}
