package e2b

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"sandfs/fs/client"
)

// The filesystem.Filesystem service on a sandbox's fs/ (the guest's root
// through the tree).

const fsSvc = "/filesystem.Filesystem/"

func (s *Server) filesystemHandlers(opts []connect.HandlerOption) []route {
	return []route{
		{fsSvc + "Stat", connect.NewUnaryHandler(fsSvc+"Stat", s.stat, opts...)},
		{fsSvc + "MakeDir", connect.NewUnaryHandler(fsSvc+"MakeDir", s.makeDir, opts...)},
		{fsSvc + "Move", connect.NewUnaryHandler(fsSvc+"Move", s.move, opts...)},
		{fsSvc + "ListDir", connect.NewUnaryHandler(fsSvc+"ListDir", s.listDir, opts...)},
		{fsSvc + "Remove", connect.NewUnaryHandler(fsSvc+"Remove", s.remove, opts...)},
		{fsSvc + "WatchDir", connect.NewServerStreamHandler(fsSvc+"WatchDir", s.watchDir, opts...)},
		{fsSvc + "CreateWatcher", connect.NewUnaryHandler(fsSvc+"CreateWatcher", s.createWatcher, opts...)},
		{fsSvc + "GetWatcherEvents", connect.NewUnaryHandler(fsSvc+"GetWatcherEvents", s.getWatcherEvents, opts...)},
		{fsSvc + "RemoveWatcher", connect.NewUnaryHandler(fsSvc+"RemoveWatcher", s.removeWatcher, opts...)},
	}
}

// entryOf is the EntryInfo of guest path p with attributes a.
func entryOf(p string, a client.Attr) entryInfo {
	mode := iofs.FileMode(a.Perm())
	typ := "FILE_TYPE_FILE"
	switch {
	case a.Dir():
		mode |= iofs.ModeDir
		typ = "FILE_TYPE_DIRECTORY"
	case a.Symlink():
		mode |= iofs.ModeSymlink
		typ = "FILE_TYPE_SYMLINK"
	}
	owner := "user"
	if a.UID == 0 {
		owner = "root"
	}
	mt := a.MTime.UTC()
	return entryInfo{
		Name: path.Base(p), Type: typ, Path: p, Size: a.Size, Mode: a.Perm(),
		Permissions: strings.Replace(mode.String(), "L", "l", 1), Owner: owner, Group: owner, ModifiedTime: &mt,
	}
}

// statEntry stats guest path p of the call's sandbox; ENOENT is
// not_found "file not found: p".
func statEntry(sc *sandboxCall, p string) (entryInfo, error) {
	a, err := sc.c.StatAttr(fsPath(sc.rec.ID, p))
	if errors.Is(err, syscall.ENOENT) {
		return entryInfo{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %s", p))
	}
	if err != nil {
		return entryInfo{}, rpcError(err)
	}
	return entryOf(p, a), nil
}

func (s *Server) stat(ctx context.Context, req *connect.Request[pathRequest]) (*connect.Response[entryResponse], error) {
	sc := sandboxOfCtx(ctx)
	e, err := statEntry(sc, guestPath(req.Msg.Path, requestUser(req.Header(), "")))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&entryResponse{Entry: &e}), nil
}

// mkdirAll makes guest directory p and its missing parents; made says
// whether p itself was made.
func mkdirAll(sc *sandboxCall, p string) (made bool, err error) {
	cur := ""
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + name
		err := sc.c.Mkdir(fsPath(sc.rec.ID, cur), 0o755)
		made = err == nil
		if errors.Is(err, syscall.EEXIST) {
			a, serr := sc.c.StatAttr(fsPath(sc.rec.ID, cur))
			if serr != nil {
				return false, serr
			}
			if !a.Dir() {
				return false, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is a file: %s", cur))
			}
			continue
		}
		if err != nil {
			return false, err
		}
	}
	return made, nil
}

func (s *Server) makeDir(ctx context.Context, req *connect.Request[pathRequest]) (*connect.Response[entryResponse], error) {
	sc := sandboxOfCtx(ctx)
	p := guestPath(req.Msg.Path, requestUser(req.Header(), ""))
	made, err := mkdirAll(sc, p)
	if err != nil {
		return nil, rpcError(err)
	}
	if !made {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
	}
	e, err := statEntry(sc, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&entryResponse{Entry: &e}), nil
}

func (s *Server) move(ctx context.Context, req *connect.Request[moveRequest]) (*connect.Response[entryResponse], error) {
	sc := sandboxOfCtx(ctx)
	user := requestUser(req.Header(), "")
	src, dst := guestPath(req.Msg.Source, user), guestPath(req.Msg.Destination, user)
	if src == "/" || dst == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("move: cannot move /"))
	}
	if err := sc.c.Rename(fsPath(sc.rec.ID, src), fsPath(sc.rec.ID, dst)); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %s", src))
		}
		return nil, rpcError(err)
	}
	e, err := statEntry(sc, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&entryResponse{Entry: &e}), nil
}

// maxEntries bounds one ListDir answer.
const maxEntries = 100000

func (s *Server) listDir(ctx context.Context, req *connect.Request[listDirRequest]) (*connect.Response[listDirResponse], error) {
	sc := sandboxOfCtx(ctx)
	p := guestPath(req.Msg.Path, requestUser(req.Header(), ""))
	root, err := statEntry(sc, p)
	if err != nil {
		return nil, err
	}
	if root.Type != "FILE_TYPE_DIRECTORY" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}
	depth := max(int(req.Msg.Depth), 1)
	out := &listDirResponse{Entries: []entryInfo{}}
	if err := listInto(ctx, sc, p, depth, &out.Entries); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(out), nil
}

// listInto appends the entries of guest directory p, and of its
// subdirectories down to depth, to out (links not followed).
func listInto(ctx context.Context, sc *sandboxCall, p string, depth int, out *[]entryInfo) error {
	ents, err := sc.c.ReadDir(fsPath(sc.rec.ID, p))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if ctx.Err() != nil || len(*out) >= maxEntries {
			return ctx.Err()
		}
		cp := path.Join(p, e.Name)
		a, err := sc.c.StatAttr(fsPath(sc.rec.ID, cp))
		if err != nil {
			continue // removed meanwhile
		}
		*out = append(*out, entryOf(cp, a))
		if a.Dir() && depth > 1 {
			if err := listInto(ctx, sc, cp, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) remove(ctx context.Context, req *connect.Request[pathRequest]) (*connect.Response[empty], error) {
	sc := sandboxOfCtx(ctx)
	p := guestPath(req.Msg.Path, requestUser(req.Header(), ""))
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("remove: refusing to remove /"))
	}
	if err := removeAll(ctx, sc, p); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}

// removeAll removes guest path p and all it holds; a missing path is no
// error (os.RemoveAll).
func removeAll(ctx context.Context, sc *sandboxCall, p string) error {
	tp := fsPath(sc.rec.ID, p)
	err := sc.c.Remove(tp, false)
	if err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	a, serr := sc.c.StatAttr(tp)
	if serr != nil || !a.Dir() {
		return err
	}
	ents, err := sc.c.ReadDir(tp)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := removeAll(ctx, sc, path.Join(p, e.Name)); err != nil {
			return err
		}
	}
	err = sc.c.Remove(tp, true)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}
