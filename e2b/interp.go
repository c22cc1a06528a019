package e2b

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"

	"github.com/go-chi/chi/v5"

	"sandfs/ctl/msg"
	"sandfs/fs/client"
)

// The code interpreter (@e2b/code-interpreter, port 49999): each context
// is a python3 process in the guest's procs/, running interp.py (written
// to the guest through fs/), fed one JSON request a line on its stdin;
// its stdout carries the NDJSON lines /execute streams.

const interpPort = "49999"

//go:embed interp.py
var interpScript []byte

// interpPath is where the script goes in the guest.
const interpPath = "/run/sandfs-e2b/interp.py"

// maxLine bounds one line of the interpreter's output.
const maxLine = 16 << 20

// codeContext is one interpreter: a process and its open stdout.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	owner    string // keyID of the sandbox's API key: the per-key cap counts it

	mu   sync.Mutex // one execution at a time; guards the rest
	out  *bufio.Reader
	dead bool
	// slot and c are also read without mu, to kill a running
	// execution's process (remove, restart) and close its connection
	// (remove, the sandbox's end): written under both mu and slotMu.
	slotMu sync.Mutex
	slot   string
	c      *client.Client
	gone   bool // removed (interps.drop): never started again
}

// removed reports whether cc was dropped from its sandbox's contexts.
func (cc *codeContext) removed() bool {
	cc.slotMu.Lock()
	defer cc.slotMu.Unlock()
	return cc.gone
}

// curSlot is cc's process slot, read without cc.mu.
func (cc *codeContext) curSlot() string {
	cc.slotMu.Lock()
	defer cc.slotMu.Unlock()
	return cc.slot
}

// closeConn closes cc's tree connection, if any (cc.mu not needed: a
// running execution's reads then end).
func (cc *codeContext) closeConn() {
	cc.slotMu.Lock()
	c := cc.c
	cc.slotMu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (s *Server) interpRouter() http.Handler {
	r := chi.NewRouter()
	r.Post("/execute", s.execute)
	r.Post("/contexts", s.createContext)
	r.Get("/contexts", s.listContexts)
	r.Delete("/contexts/{cid}", s.removeContext)
	r.Post("/contexts/{cid}/restart", s.restartContext)
	r.NotFound(noRoute)
	return r
}

// start writes the script and starts cc's process (cc.mu held).
func (s *Server) startInterp(sc *sandboxCall, cc *codeContext) error {
	if err := writeFile(sc, interpPath, bytes.NewReader(interpScript)); err != nil {
		return err
	}
	c, err := s.streamTree(context.Background(), sc.key)
	if err != nil {
		return err
	}
	dir := procsDir(sc.rec.ID)
	clone, err := c.Open(dir+"clone", syscall.O_RDWR)
	if err != nil {
		c.Close()
		return err
	}
	defer clone.Close()
	b := make([]byte, 32)
	n, _ := clone.Read(b)
	slot := strings.TrimSpace(string(b[:n]))
	msgs := []string{"user user"}
	if cc.Cwd != "" {
		msgs = append(msgs, "cwd "+msg.Quote(cc.Cwd))
	}
	msgs = append(msgs, "start /usr/bin/python3 -u "+interpPath)
	for _, m := range msgs {
		if err := clone.Msg(m, "sandboxes/"+sc.rec.ID+"/err"); err != nil {
			c.Close()
			return err
		}
	}
	f, err := c.Open(dir+slot+"/stdout", syscall.O_RDONLY)
	if err != nil {
		c.Close()
		return err
	}
	cc.out, cc.dead = bufio.NewReaderSize(f, 64<<10), false
	cc.slotMu.Lock()
	cc.slot, cc.c = slot, c
	cc.slotMu.Unlock()
	return nil
}

// stop kills cc's process and closes its connection (cc.mu not needed:
// it ends a running execution, which then returns).
func (s *Server) stopInterp(sc *sandboxCall, slot string) {
	if slot != "" {
		sc.c.WriteMsg(procsDir(sc.rec.ID)+slot+"/ctl", "signal KILL", "")
	}
}

// newContext makes and starts a context, or returns the one named id if
// a concurrent call made it first. Its slot is taken before it starts
// (the caps hold under concurrent creates) and given back if it fails.
func (s *Server) newContext(sc *sandboxCall, id, lang, cwd string) (*codeContext, error) {
	if lang != "" && lang != "python" {
		return nil, msg.Errorf(syscall.EINVAL, "contexts: language %q not supported (python only)", lang)
	}
	if len(cwd) > maxCwd || strings.ContainsRune(cwd, 0) {
		return nil, msg.Errorf(syscall.EINVAL, "contexts: bad cwd (at most %d bytes, no NUL)", maxCwd)
	}
	cc := &codeContext{ID: id, Language: "python", Cwd: cwd, owner: sc.rec.Owner}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	had, err := s.ctxs.add(sc.rec.ID, cc)
	if err != nil || had != nil {
		return had, err
	}
	if err := s.startInterp(sc, cc); err != nil {
		cc.dead = true
		s.ctxs.remove(sc.rec.ID, cc)
		return nil, err
	}
	return cc, nil
}

// maxCwd bounds a context's cwd.
const maxCwd = 4096

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	sc := sandboxOfCtx(r.Context())
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "contexts: "+err.Error())
		return
	}
	cc, err := s.newContext(sc, newToken()[:12], req.Language, req.Cwd)
	if err != nil {
		s.treeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cc)
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	out := []*codeContext{}
	out = append(out, s.ctxs.list(sandboxOfCtx(r.Context()).rec.ID)...)
	writeJSON(w, http.StatusOK, out)
}

// contextOf is the request's sandbox and its context {cid}; when there
// is none it answers 404 itself (nil).
func (s *Server) contextOf(w http.ResponseWriter, r *http.Request) (*sandboxCall, *codeContext) {
	sc := sandboxOfCtx(r.Context())
	cc := s.ctxs.get(sc.rec.ID, chi.URLParam(r, "cid"))
	if cc == nil {
		writeError(w, http.StatusNotFound, "context not found")
	}
	return sc, cc
}

func (s *Server) removeContext(w http.ResponseWriter, r *http.Request) {
	sc, cc := s.contextOf(w, r)
	if cc == nil {
		return
	}
	s.stopInterp(sc, cc.curSlot())
	s.ctxs.drop(sc.rec.ID, cc.ID)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	sc, cc := s.contextOf(w, r)
	if cc == nil {
		return
	}
	s.stopInterp(sc, cc.curSlot())
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.removed() {
		writeError(w, http.StatusNotFound, "context removed")
		return
	}
	cc.closeConn()
	if err := s.startInterp(sc, cc); err != nil {
		s.treeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// execute is POST /execute {"code", "context_id"?, "language"?,
// "env_vars"?}: the request line to the context's stdin, then its
// output lines streamed until end_of_execution.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	sc := sandboxOfCtx(r.Context())
	var req struct {
		Code      string            `json:"code"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "execute: "+err.Error())
		return
	}
	cc, err := s.contextFor(sc, req.ContextID, req.Language)
	if err != nil {
		s.treeError(w, err)
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.removed() {
		writeError(w, http.StatusNotFound, "context removed")
		return
	}
	if cc.dead {
		if err := s.startInterp(sc, cc); err != nil {
			s.treeError(w, err)
			return
		}
	}
	line, _ := json.Marshal(map[string]any{"code": req.Code, "env_vars": req.EnvVars})
	if err := sendLine(sc, procsDir(sc.rec.ID)+cc.slot+"/stdin", line); err != nil {
		cc.dead = true
		s.treeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	for {
		b, err := readLine(cc.out)
		if err != nil {
			cc.dead = true
			b, _ = json.Marshal(map[string]string{"type": "error", "name": "KernelDied",
				"value": "the interpreter ended: " + err.Error(), "traceback": ""})
		}
		if r.Context().Err() == nil { // the client may have gone: the rest is drained
			w.Write(append(b, '\n'))
			if fl != nil {
				fl.Flush()
			}
		}
		var t struct{ Type string }
		if err != nil || (json.Unmarshal(b, &t) == nil && t.Type == "end_of_execution") {
			return
		}
	}
}

// contextFor is context id, or without one the sandbox's default
// context, made at its first use.
func (s *Server) contextFor(sc *sandboxCall, id, lang string) (*codeContext, error) {
	if id != "" {
		if cc := s.ctxs.get(sc.rec.ID, id); cc != nil {
			return cc, nil
		}
		return nil, msg.Errorf(syscall.ENOENT, "execute: no context %q", id)
	}
	if cc := s.ctxs.get(sc.rec.ID, "default"); cc != nil {
		return cc, nil
	}
	return s.newContext(sc, "default", lang, "/home/user")
}

// sendLine writes one line to a process's stdin. An open that timed out
// (the tree closes a guest connection that did not answer a walk in
// time, as under a starved guest) is tried again: nothing was written.
func sendLine(sc *sandboxCall, path string, line []byte) error {
	f, err := sc.c.Open(path, syscall.O_WRONLY)
	for try := 0; try < 2 && errors.Is(err, syscall.ETIMEDOUT); try++ {
		f, err = sc.c.Open(path, syscall.O_WRONLY)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readLine reads one line (without its newline) of at most maxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("output line over %d bytes", maxLine)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}
