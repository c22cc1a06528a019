package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"syscall"

	"sandfs/fs/client"
)

// envdError writes envd's REST error body, {"code": status, "message"}.
func envdError(w http.ResponseWriter, status int, msg string) { writeError(w, status, msg) }

// download is GET /files?path=P: the guest file's bytes.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	sc := sandboxOfCtx(r.Context())
	q := r.URL.Query()
	if q.Get("path") == "" {
		envdError(w, http.StatusBadRequest, "path is required")
		return
	}
	p := guestPath(q.Get("path"), requestUser(r.Header, q.Get("username")))
	tp := fsPath(sc.rec.ID, p)
	a, err := sc.c.StatAttr(tp)
	switch {
	case errors.Is(err, syscall.ENOENT):
		envdError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
		return
	case err != nil:
		envdError(w, httpStatus(err), err.Error())
		return
	case a.Dir():
		envdError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", p))
		return
	}
	f, err := sc.c.Open(tp, syscall.O_RDONLY)
	if err != nil {
		envdError(w, httpStatus(err), err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(a.Size, 10))
	w.WriteHeader(http.StatusOK)
	io.CopyN(w, f, a.Size) // a short copy is the client's or the guest's end: nothing left to tell
}

// uploaded is one entry of POST /files's answer.
type uploaded struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// upload is POST /files: a multipart form (each "file" part to ?path=,
// else to its file name) or a raw body to ?path= (octet-stream, maybe
// gzip): parents made, an existing file truncated.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	sc := sandboxOfCtx(r.Context())
	q := r.URL.Query()
	user := requestUser(r.Header, q.Get("username"))
	var out []uploaded
	put := func(dst string, body io.Reader) bool {
		p := guestPath(dst, user)
		if err := writeFile(sc, p, body); err != nil {
			envdError(w, uploadStatus(err), fmt.Sprintf("write %s: %v", p, err))
			return false
		}
		out = append(out, uploaded{Path: p, Name: path.Base(p), Type: "file"})
		return true
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				envdError(w, http.StatusBadRequest, "multipart: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				continue
			}
			dst := q.Get("path")
			if dst == "" {
				dst = rawFileName(part)
			}
			if dst == "" {
				envdError(w, http.StatusBadRequest, "a file part needs a path or a file name")
				return
			}
			if !put(dst, part) {
				return
			}
		}
	} else {
		if q.Get("path") == "" {
			envdError(w, http.StatusBadRequest, "path is required")
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				envdError(w, http.StatusBadRequest, "gzip: "+err.Error())
				return
			}
			body = zr
		}
		if !put(q.Get("path"), body) {
			return
		}
	}
	if len(out) == 0 {
		envdError(w, http.StatusBadRequest, "no file in the request")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// uploadStatus is the HTTP status of a failed upload.
func uploadStatus(err error) int {
	if errors.Is(err, syscall.EISDIR) {
		return http.StatusBadRequest
	}
	return httpStatus(err)
}

// writeFile writes body to guest file p: its parents made, the file
// created (0644) or truncated.
func writeFile(sc *sandboxCall, p string, body io.Reader) error {
	tp := fsPath(sc.rec.ID, p)
	var f *client.File
	a, err := sc.c.StatAttr(tp)
	switch {
	case err == nil && a.Dir():
		return syscall.EISDIR
	case err == nil:
		f, err = sc.c.Open(tp, syscall.O_WRONLY|syscall.O_TRUNC)
	case errors.Is(err, syscall.ENOENT):
		f, err = sc.c.Create(tp, 0o644)
		if errors.Is(err, syscall.ENOENT) && path.Dir(p) != "/" { // parents first, only when missing
			if _, err = mkdirAll(sc, path.Dir(p)); err == nil {
				f, err = sc.c.Create(tp, 0o644)
			}
		}
	}
	if err != nil {
		return err
	}
	err = copyFull(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rawFileName is a part's file name as sent: the destination path
// (multipart.Part.FileName keeps only its last element).
func rawFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// writeChunk is the size of one write to the tree: a multipart reader
// hands out 4 KiB at a time, and each write is a round trip to the
// guest. It is the 9P payload of fs/client's connection (msize 256 KiB;
// hugelgupf/p9's client sends at most msize less its largest fixed
// part, rounded down to 512: 256 KiB - 512), so that each write is one
// 9P write: a chunk of 256 KiB went as two, 261632 bytes then 512, and a
// 1 MiB upload cost 8 round trips to the guest where the tree's `cp`
// makes 5 (profiled in the lab, docs/e2b.md Benchmark).
const writeChunk = 256<<10 - 512

// copyFull copies src to dst in writes of writeChunk bytes (the last
// one shorter).
func copyFull(dst io.Writer, src io.Reader) error {
	buf := make([]byte, writeChunk)
	for {
		n, err := io.ReadFull(src, buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
