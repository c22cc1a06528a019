package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	"sandfs/ctl/cred"
	"sandfs/fs/client"
)

// EnvdVersion is the envd version the adapter reports: the SDK gates
// features on it (closeStdin ≥ 0.5.2, octet-stream uploads ≥ 0.5.7).
const EnvdVersion = "0.5.7"

// Dialer connects to the sandfs tree as who: a new 9P client whose
// requests the tree checks as who's.
type Dialer func(ctx context.Context, who cred.Cred) (*client.Client, error)

// Config configures a Server.
type Config struct {
	// Keys maps each API key to the tree identity it acts as.
	Keys map[string]cred.Cred
	// Dial reaches the tree.
	Dial Dialer
	// Registry keeps what only E2B has of each sandbox.
	Registry *Registry
	Log      *slog.Logger
}

// Server is the adapter: Handler serves REST and envd on one port.
type Server struct {
	cfg  Config
	log  *slog.Logger
	reg  *Registry
	rest http.Handler
	envd http.Handler
	// interp is the code interpreter's routes (E2b-Sandbox-Port 49999).
	interp http.Handler
	ctxs   interps
	// watchers are the polling watchers (watchers.go).
	watchers watchers
	samples  samples // getMetrics' samples of each sandbox (samples.go)

	mu      sync.Mutex                // guards clients and down
	clients map[string]*client.Client // by API key: the shared connection of unary calls
	down    map[string]*backoff       // by API key: its failed dials, while they last
	now     func() time.Time          // the clock of the backoff (tests move it)
	pids    pidTable
}

// New makes a Server.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cfg.Log, reg: cfg.Registry, clients: map[string]*client.Client{},
		down: map[string]*backoff{}, now: time.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.reg == nil {
		s.reg = NewRegistry("")
	}
	s.rest = s.restRouter()
	s.envd = s.envdRouter()
	s.interp = s.interpRouter()
	return s
}

// ServeHTTP routes by the E2b-Sandbox-Id header: present, envd traffic
// for that sandbox; absent, the REST API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		s.envd.ServeHTTP(w, r)
		return
	}
	s.rest.ServeHTTP(w, r)
}

// Close closes the shared tree connections.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.clients {
		c.Close()
		delete(s.clients, k)
	}
}

// keyOf returns the API key of r if it is a known one.
func (s *Server) keyOf(r *http.Request) (string, bool) {
	got := r.Header.Get("X-Api-Key")
	for k := range s.cfg.Keys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(got)) == 1 {
			return k, true
		}
	}
	return "", false
}

// apiError is the REST error body: the SDK tests its numeric code.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError writes {"code": status, "message": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// httpStatus is the HTTP status of a tree error, by its errno (the tree
// out of reach: 503).
func httpStatus(err error) int {
	if errors.Is(err, errTreeDown) {
		return http.StatusServiceUnavailable
	}
	var en syscall.Errno
	if !errors.As(err, &en) {
		return http.StatusInternalServerError
	}
	switch en {
	case syscall.EINVAL, syscall.E2BIG, syscall.ENOTDIR, syscall.EISDIR:
		return http.StatusBadRequest
	case syscall.ENOENT:
		return http.StatusNotFound
	case syscall.EEXIST, syscall.EBUSY:
		return http.StatusConflict
	case syscall.EPERM, syscall.EACCES:
		return http.StatusForbidden
	case syscall.ENOSPC:
		return http.StatusInsufficientStorage
	case syscall.EAGAIN:
		return http.StatusTooManyRequests
	case syscall.ENODEV:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// treeError writes err as a REST error, its status from its errno.
func (s *Server) treeError(w http.ResponseWriter, err error) {
	err = s.connLost(err)
	st := httpStatus(err)
	if st == http.StatusInternalServerError {
		s.log.Error("e2b: " + err.Error())
	}
	writeError(w, st, err.Error())
}

// noRoute answers a request no route of a router takes: 404 with E2B's
// error body.
func noRoute(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
}

// urlParam is chi's path parameter name of r.
func urlParam(r *http.Request, name string) string { return chi.URLParam(r, name) }
