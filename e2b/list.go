package e2b

import (
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// listedSandbox is E2B's ListedSandbox (and, for GET /sandboxes/{id},
// SandboxDetail, which adds the access token).
type listedSandbox struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
}

// listed is rec as E2B lists it, with its tree status st.
func listed(rec *Record, st sandboxStatus) listedSandbox {
	end := st.Deadline
	if end.IsZero() {
		end = rec.Started.Add(24 * time.Hour)
	}
	return listedSandbox{
		SandboxID: rec.ID, TemplateID: rec.Template, Alias: rec.Template, ClientID: "sandfs",
		StartedAt: rec.Started, EndAt: end.UTC(), CPUCount: st.CPUs, MemoryMB: st.MemMB,
		Metadata: rec.Metadata, State: e2bState(st.State), EnvdVersion: EnvdVersion,
	}
}

// info is GET /sandboxes/{id}: its status line; a sandbox that is
// neither running nor paused is not found.
func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	st, err := readStatus(cl.c, cl.rec.ID)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		s.treeError(w, err)
		return
	}
	if err != nil || e2bState(st.State) == "" {
		writeError(w, http.StatusNotFound, "sandbox "+strconv.Quote(cl.rec.ID)+" not found")
		return
	}
	d := listed(cl.rec, st)
	d.EnvdAccessToken = cl.rec.Token
	writeJSON(w, http.StatusOK, d)
}

// listQuery is GET /v2/sandboxes's query.
type listQuery struct {
	metadata     map[string]string
	states       map[string]bool
	startedAfter time.Time
	template     string
	asc          bool
	limit, start int
}

// parseListQuery reads the query as the SDK sends it (form style,
// metadata encoded as a query string of its own, keys and values
// escaped once more).
func parseListQuery(q url.Values, v1 bool) (listQuery, error) {
	lq := listQuery{metadata: map[string]string{}, states: map[string]bool{}, limit: 100}
	if m := q.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return lq, err
		}
		for k, vs := range pairs {
			uk, err1 := url.QueryUnescape(k)
			uv, err2 := url.QueryUnescape(vs[0])
			if err1 != nil || err2 != nil {
				return lq, errors.New("bad metadata filter")
			}
			lq.metadata[uk] = uv
		}
	}
	state := q.Get("state")
	if v1 {
		state = "running"
	}
	if state == "" {
		state = "running,paused"
	}
	for st := range strings.SplitSeq(state, ",") {
		lq.states[st] = true
	}
	if a := q.Get("startedAfter"); a != "" {
		t, err := time.Parse(time.RFC3339, a)
		if err != nil {
			return lq, err
		}
		lq.startedAfter = t
	}
	lq.template = q.Get("template")
	lq.asc = q.Get("order") == "asc"
	for name, p := range map[string]*int{"limit": &lq.limit, "nextToken": &lq.start} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return lq, errors.New("bad " + name)
			}
			*p = n
		}
	}
	lq.limit = min(max(lq.limit, 1), 1000)
	return lq, nil
}

// match reports whether l passes the query's filters.
func (lq listQuery) match(l listedSandbox) bool {
	if !lq.states[l.State] || l.StartedAt.Before(lq.startedAfter) {
		return false
	}
	if lq.template != "" && lq.template != l.TemplateID {
		return false
	}
	for k, v := range lq.metadata {
		if l.Metadata[k] != v {
			return false
		}
	}
	return true
}

// list is GET /v2/sandboxes (and v1's): the key's sandboxes, each with
// its status line, filtered, ordered by start, one page (X-Next-Token).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	lq, err := parseListQuery(r.URL.Query(), !strings.HasPrefix(r.URL.Path, "/v2/"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "list: "+err.Error())
		return
	}
	out := []listedSandbox{}
	for _, rec := range s.reg.Owned(keyID(cl.key)) {
		st, err := readStatus(cl.c, rec.ID)
		if errors.Is(err, syscall.ENOENT) {
			continue
		}
		if err != nil {
			s.treeError(w, err)
			return
		}
		if l := listed(rec, st); lq.match(l) {
			out = append(out, l)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if lq.asc {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[j].StartedAt.Before(out[i].StartedAt)
	})
	out = out[min(lq.start, len(out)):]
	if len(out) > lq.limit {
		out = out[:lq.limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(lq.start+lq.limit))
	}
	writeJSON(w, http.StatusOK, out)
}
