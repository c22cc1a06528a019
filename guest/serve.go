package guest

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sandfs/ctl/cred"
	"sandfs/fs/ninep"
)

// Options configure a Server. The zero value is the guest's.
type Options struct {
	// Etc is the root whose /etc/passwd and /etc/group resolve `user`
	// ("" = "/"). Processes always run in the real root; this only exists
	// so tests can name users without touching the host's /etc.
	Etc string
	// Retention is how long a finished process's record is kept once
	// nothing has it open (0 = DefaultRetention).
	Retention time.Duration
	// Logf logs (nil = log.Printf).
	Logf func(format string, a ...any)
	// Debug logs the 9P server's debug messages too.
	Debug bool
}

// Server is the guest agent's file tree (rootTable: ctl, err, fs/,
// procs/), served over 9P by package ninep's server. Process records
// belong to the Server, so processes outlive the connections that
// started them.
type Server struct {
	procs *procTable
	fs    *fsTree
	opt   Options
	sys   sysOps
	tree  *ninep.Server

	mu      sync.Mutex // guards errText
	errText string     // last failed /ctl or watch write, served by /err

	watches atomic.Int32 // open watches (watch.go), at most maxWatches
}

// NewServer returns a server whose fs/ is the directory root.
func NewServer(root string, opt Options) *Server {
	if opt.Etc == "" {
		opt.Etc = "/"
	}
	if opt.Retention == 0 {
		opt.Retention = DefaultRetention
	}
	if opt.Logf == nil {
		opt.Logf = log.Printf
	}
	s := &Server{procs: newProcTable(opt.Etc, opt.Retention), fs: newFSTree(root), opt: opt, sys: realSysOps("/")}
	level := slog.LevelWarn
	if opt.Debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(logfWriter(opt.Logf), &slog.HandlerOptions{Level: level}))
	s.tree = ninep.NewServer(rootTable.Dir(s, 0o555, nil), logger)
	return s
}

// logfWriter turns the lines slog writes into Logf calls.
type logfWriter func(format string, a ...any)

func (w logfWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Serve accepts connections on l and serves each in its own goroutine.
func (s *Server) Serve(l net.Listener) error { return acceptEach(l, s.ServeConn) }

// acceptEach accepts connections on l and hands each to serve in a
// goroutine of its own, until l fails (a timeout is waited out).
func acceptEach(l net.Listener, serve func(net.Conn)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go serve(c)
	}
}

// ServeConn serves one connection until it closes. Its client is root:
// the agent serves the host only (sandfs-init accepts vsock connections
// from CID 2 alone), so the modes the tree shows are what the files
// offer, not who may use them. Each connection has its own 9P session,
// so a blocking read on one never holds a lock another needs; when it
// ends, every read blocked on it ends.
func (s *Server) ServeConn(c net.Conn) {
	s.tree.ServeConnAs(context.Background(), c, cred.Cred{})
}
