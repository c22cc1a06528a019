package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	"sandfs/ctl/msg"
	"sandfs/fs/client"
)

type ctxKey int

const keyCtx ctxKey = iota

// restRouter is the REST API: the routes the E2B SDKs call.
func (s *Server) restRouter() http.Handler {
	r := chi.NewRouter()
	r.Use(s.requireKey)
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		r.Post(p, s.create)
		r.Get(p, s.list)
	}
	r.Route("/sandboxes/{id}", func(r chi.Router) {
		r.Get("/", s.info)
		r.Delete("/", s.kill)
		r.Post("/timeout", s.secondsVerb("timeout", 0))
		r.Post("/refreshes", s.secondsVerb("duration", 60))
		r.Post("/pause", s.pause)
		r.Post("/resume", s.connect)
		r.Post("/connect", s.connect)
		r.Get("/metrics", s.metrics)
		r.Post("/snapshots", s.snapshot)
		r.Post("/fork", s.fork)
	})
	r.Post("/v2/sandboxes/{id}/connect", s.connect)
	r.Get("/snapshots", s.listSnapshots)
	r.Delete("/templates/{id}", s.deleteSnapshot)
	r.NotFound(noRoute)
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method not allowed: "+r.Method+" "+r.URL.Path)
	})
	return r
}

// requireKey refuses a request without a known X-API-KEY (401) and
// passes the key on in the context.
func (s *Server) requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := s.keyOf(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, "invalid or missing API key (X-API-KEY)")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyCtx, key)))
	})
}

// maxBody bounds every JSON request body.
const maxBody = 1 << 20

// decode reads r's JSON body into v (an empty body leaves v as is).
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return err
	}
	if len(b) > maxBody {
		return errors.New("request body too large")
	}
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// call is one REST request's key, its tree connection and, for routes
// with {id}, the sandbox's record.
type call struct {
	key string
	c   *client.Client
	rec *Record
}

// begin resolves r: the key's tree connection and, when withID, the
// record of {id}, which must be the key's (404 otherwise, so that a key
// learns nothing of others' sandboxes). It writes the error itself.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, withID bool) (call, bool) {
	key := r.Context().Value(keyCtx).(string)
	cl := call{key: key}
	if withID {
		id := chi.URLParam(r, "id")
		cl.rec = s.reg.Get(id)
		if cl.rec == nil || cl.rec.Owner != keyID(key) {
			writeError(w, http.StatusNotFound, "sandbox "+strconv.Quote(id)+" not found")
			return cl, false
		}
	}
	c, err := s.tree(r.Context(), key)
	if err != nil {
		s.treeError(w, err)
		return cl, false
	}
	cl.c = c
	return cl, true
}

// ctlMsg writes one message to sandbox id's ctl and returns the reply
// a read of the same open gives.
func ctlMsg(c *client.Client, path, errPath, m string) (string, error) {
	f, err := c.Open(path, syscall.O_RDWR)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// A write at the file's offset moves it: the reply is read from
	// where the message ended, as the tree gives it.
	if _, err := f.Write([]byte(m)); err != nil {
		e := &client.Error{Op: "write " + path, Errno: msg.Errno(err)}
		if b, rerr := c.ReadFileMax(errPath, client.MaxErrText); rerr == nil {
			e.Text = strings.TrimSpace(string(b))
		}
		return "", e
	}
	b, err := f.ReadAllMax(client.MaxReply)
	return strings.TrimSpace(string(b)), err
}

func sandboxCtl(id string) (ctl, errPath string) {
	return "sandboxes/" + id + "/ctl", "sandboxes/" + id + "/err"
}

// newSandbox is the body of POST /v2/sandboxes (and v1's).
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	Timeout    *int              `json:"timeout"`
}

// sandboxJSON is E2B's Sandbox: the answer of create and connect.
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

func sandboxOf(rec *Record) sandboxJSON {
	return sandboxJSON{
		SandboxID: rec.ID, TemplateID: rec.Template, Alias: rec.Template, ClientID: "sandfs",
		EnvdVersion: EnvdVersion, EnvdAccessToken: rec.Token, TrafficAccessToken: &rec.Token,
	}
}

// create is POST /v2/sandboxes: `new template=T timeout=N` on /ctl, or
// `new from=SNAP` when the template names one of the key's snapshots
// (the registry's: never another key's).
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	var req newSandbox
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "create: "+err.Error())
		return
	}
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	timeout := 300
	if strings.HasPrefix(r.URL.Path, "/sandboxes") {
		timeout = 15 // v1's default
	}
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 0 {
		writeError(w, http.StatusBadRequest, "create: negative timeout")
		return
	}
	tmpl := req.TemplateID
	if tmpl == "code-interpreter-v1" { // the code interpreter SDK's default: base has python3
		tmpl = "base"
	}
	m := "new template=" + msg.Quote(tmpl)
	if s.ownSnap(cl, req.TemplateID) { // another key's snapshot is no template either
		m = "new from=" + msg.Quote(req.TemplateID)
	}
	m += " timeout=" + strconv.Itoa(timeout)
	id, err := ctlMsg(cl.c, "ctl", "err", m)
	if err != nil {
		s.treeError(w, err)
		return
	}
	rec := &Record{
		ID: id, Owner: keyID(cl.key), Template: req.TemplateID, Metadata: req.Metadata,
		Envs: req.EnvVars, Token: newToken(), Started: time.Now().UTC(),
	}
	if err := s.reg.Put(rec); err != nil {
		s.log.Error("e2b: registry: " + err.Error())
	}
	writeJSON(w, http.StatusCreated, sandboxOf(rec))
}

// kill is DELETE /sandboxes/{id}: kill on its ctl, rm on /ctl.
func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	id := cl.rec.ID
	s.log.Info("e2b: kill", "id", id, "remote", r.RemoteAddr, "agent", r.UserAgent())
	ctl, errPath := sandboxCtl(id)
	err := cl.c.WriteMsg(ctl, "kill", errPath)
	if err != nil && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOENT) {
		s.treeError(w, err)
		return
	}
	if err := cl.c.WriteMsg("ctl", "rm "+msg.Quote(id), "err"); err != nil && !errors.Is(err, syscall.ENOENT) {
		s.log.Warn("e2b: rm after kill", "id", id, "err", err)
	}
	s.reg.Delete(id)
	s.ctxs.drop(id, "")
	s.watchers.remove(id, "")
	s.samples.drop(id)
	w.WriteHeader(http.StatusNoContent)
}

// secondsVerb is a handler of a body of one field of seconds, `timeout
// S` on the sandbox's ctl: POST .../timeout {"timeout"} and POST
// .../refreshes {"duration"} (0 or absent: dflt).
func (s *Server) secondsVerb(field string, dflt int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cl, ok := s.begin(w, r, true)
		if !ok {
			return
		}
		var req map[string]int
		if err := decode(r, &req); err != nil || req[field] < 0 {
			writeError(w, http.StatusBadRequest, path.Base(r.URL.Path)+`: want {"`+field+`": seconds}`)
			return
		}
		n := req[field]
		if n == 0 {
			n = dflt
		}
		s.ctlVerb(w, cl, "timeout "+strconv.Itoa(n))
	}
}

// pause is POST /sandboxes/{id}/pause: 409 if not running.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	s.ctlVerb(w, cl, "pause")
}

// ctlVerb writes verb to the sandbox's ctl and answers 204.
func (s *Server) ctlVerb(w http.ResponseWriter, cl call, verb string) {
	ctl, errPath := sandboxCtl(cl.rec.ID)
	if err := cl.c.WriteMsg(ctl, verb, errPath); err != nil {
		s.treeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect is POST /v2/sandboxes/{id}/connect (and v1's connect and
// resume): a paused sandbox is resumed (201), a running one answers 200;
// a timeout given becomes its new timeout.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.begin(w, r, true)
	if !ok {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "connect: "+err.Error())
		return
	}
	st, err := readStatus(cl.c, cl.rec.ID)
	if err != nil {
		s.treeError(w, err)
		return
	}
	ctl, errPath := sandboxCtl(cl.rec.ID)
	status := http.StatusOK
	switch st.State {
	case "paused":
		if err := cl.c.WriteMsg(ctl, "resume", errPath); err != nil {
			s.treeError(w, err)
			return
		}
		status = http.StatusCreated
	case "running":
	default:
		writeError(w, http.StatusNotFound, "sandbox "+strconv.Quote(cl.rec.ID)+" is "+st.State)
		return
	}
	if req.Timeout != nil && *req.Timeout > 0 {
		if err := cl.c.WriteMsg(ctl, "timeout "+strconv.Itoa(*req.Timeout), errPath); err != nil {
			s.treeError(w, err)
			return
		}
	}
	writeJSON(w, status, sandboxOf(cl.rec))
}

// plainName reports whether s may name a file of the tree: lower-case
// letters, digits and dashes (the tree's name grammar is checked by the
// tree itself; this keeps paths such as "../x" out of a walk).
func plainName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
