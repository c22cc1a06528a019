package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"path"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/go-chi/chi/v5"

	"sandfs/fs/client"
)

// envdPort is the port the SDK names (E2b-Sandbox-Port) for envd; the
// code interpreter's is 49999.
const envdPort = "49983"

// sandboxCall is one envd request's sandbox: its record and the tree
// connection of the key that owns it.
type sandboxCall struct {
	rec *Record
	key string // the owning API key
	c   *client.Client
}

const sandboxCtx ctxKey = 1

func sandboxOfCtx(ctx context.Context) *sandboxCall {
	sc, _ := ctx.Value(sandboxCtx).(*sandboxCall)
	return sc
}

// envdRouter serves the envd protocol of the sandbox named by
// E2b-Sandbox-Id: the Connect services, /files and /health.
func (s *Server) envdRouter() http.Handler {
	r := chi.NewRouter()
	r.Use(s.requireSandbox)
	opts := []connect.HandlerOption{connect.WithCodec(jsonCodec{}), connect.WithReadMaxBytes(1 << 20),
		connect.WithInterceptors(lostInterceptor{s})}
	for _, h := range s.processHandlers(opts) {
		r.Handle(h.path, h.h)
	}
	for _, h := range s.filesystemHandlers(opts) {
		r.Handle(h.path, h.h)
	}
	r.Get("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	r.Get("/files", s.download)
	r.Post("/files", s.upload)
	r.NotFound(noRoute)
	return r
}

type route struct {
	path string
	h    http.Handler
}

// requireSandbox resolves E2b-Sandbox-Id: an unknown sandbox, or one
// not running, answers 502 as E2B's edge does (the SDK reads it as "not
// running"); a wrong X-Access-Token 401; a port other than envd's 502.
func (s *Server) requireSandbox(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("E2b-Sandbox-Id")
		rec := s.reg.Get(id)
		if rec == nil {
			writeError(w, http.StatusBadGateway, "sandbox "+id+" not found")
			return
		}
		port := r.Header.Get("E2b-Sandbox-Port")
		if port != "" && port != envdPort && port != interpPort {
			writeError(w, http.StatusBadGateway, "sandbox "+id+": nothing listens on port "+port)
			return
		}
		// The code interpreter's SDK sends the access token on /execute
		// only, and the traffic token (the same here) on every call.
		tok := r.Header.Get("X-Access-Token")
		if tok == "" {
			tok = r.Header.Get("E2b-Traffic-Access-Token")
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(rec.Token)) != 1 && !s.signedOK(r, rec) {
			writeError(w, http.StatusUnauthorized, "invalid access token")
			return
		}
		key, ok := s.keyByID(rec.Owner)
		if !ok {
			writeError(w, http.StatusBadGateway, "sandbox "+id+": its API key is gone")
			return
		}
		c, err := s.tree(r.Context(), key)
		if err != nil {
			s.treeError(w, err)
			return
		}
		st, err := readStatus(c, id)
		if err = s.connLost(err); errors.Is(err, errTreeDown) {
			s.treeError(w, err)
			return
		}
		if errors.Is(err, syscall.ENOENT) || (err == nil && e2bState(st.State) == "") {
			s.ctxs.drop(id, "") // it ended without a kill here (its timeout)
			s.watchers.remove(id, "")
		}
		if err != nil || st.State != "running" {
			writeError(w, http.StatusBadGateway, "sandbox "+id+" is not running")
			return
		}
		ctx := context.WithValue(r.Context(), sandboxCtx, &sandboxCall{rec: rec, key: key, c: c})
		if port == interpPort {
			s.interp.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// signedOK is for the SDK's signed URLs: not issued here, never valid.
func (s *Server) signedOK(*http.Request, *Record) bool { return false }

// keyByID finds the API key with keyID id.
func (s *Server) keyByID(id string) (string, bool) {
	for k := range s.cfg.Keys {
		if keyID(k) == id {
			return k, true
		}
	}
	return "", false
}

// requestUser is the user of an envd request: the Basic-auth name
// ("root:" is root), else username=, else E2B's default user.
func requestUser(h http.Header, query string) string {
	if a, ok := strings.CutPrefix(h.Get("Authorization"), "Basic "); ok {
		if b, err := base64.StdEncoding.DecodeString(a); err == nil {
			if u, _, _ := strings.Cut(string(b), ":"); u != "" {
				return u
			}
		}
	}
	if query != "" {
		return query
	}
	return "user"
}

// homeOf is the home directory of an E2B user in sandfs's guests.
func homeOf(user string) string {
	if user == "root" {
		return "/root"
	}
	return "/home/" + user
}

// guestPath resolves p as envd does: ~ and relative paths against the
// user's home; the result is absolute and clean.
func guestPath(p, user string) string {
	home := homeOf(user)
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = home + p[1:]
	case !strings.HasPrefix(p, "/"):
		p = home + "/" + p
	}
	return path.Clean(p)
}

// fsPath is guest path p in sandbox id's tree.
func fsPath(id, p string) string { return "sandboxes/" + id + "/fs" + p }

// rpcError is a tree error as a Connect error: the errno gives the code,
// the text (the err file's) the message.
func rpcError(err error) error {
	var en syscall.Errno
	code := connect.CodeInternal
	if errors.As(err, &en) {
		switch en {
		case syscall.ENOENT:
			code = connect.CodeNotFound
		case syscall.EINVAL, syscall.ENOTDIR, syscall.EISDIR, syscall.E2BIG:
			code = connect.CodeInvalidArgument
		case syscall.EEXIST:
			code = connect.CodeAlreadyExists
		case syscall.EACCES, syscall.EPERM:
			code = connect.CodePermissionDenied
		case syscall.EBUSY:
			code = connect.CodeFailedPrecondition
		case syscall.ENOSPC:
			code = connect.CodeResourceExhausted
		}
	}
	return connect.NewError(code, err)
}
