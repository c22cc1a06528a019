package guest

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/hugelgupf/p9/p9"
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
	// Debug logs every 9P message.
	Debug bool
}

// Server is the guest agent's 9P server: procs/ and fs/ (see the package
// doc). Process records belong to the Server, so processes outlive the
// connections that started them.
type Server struct {
	root  string
	procs *procTable
	opt   Options
	sys   sysOps

	mu      sync.Mutex // guards errText
	errText string     // last failed /ctl write, served by /err
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
	return &Server{root: root, procs: newProcTable(opt.Etc, opt.Retention), opt: opt, sys: realSysOps("/")}
}

// Serve accepts connections on l and serves each in its own goroutine.
func (s *Server) Serve(l net.Listener) error {
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
		go s.ServeConn(c)
	}
}

// ServeConn serves one connection until it closes. Each connection gets
// its own p9.Server, so a blocking read on one connection never holds a
// lock another connection needs, and the connection's end (EOF or error
// on read) cancels every blocking read made on it.
func (s *Server) ServeConn(c io.ReadWriteCloser) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc := &conn{s: s, ctx: ctx}
	pc.wire.init()
	cc := &ctxConn{ReadWriteCloser: c, cancel: cancel, c: pc}
	var opts []p9.ServerOpt
	if s.opt.Debug {
		opts = append(opts, p9.WithServerLogger(logger(s.opt.Logf)))
	}
	srv := p9.NewServer(&attacher{c: pc}, opts...)
	defer func() {
		// See ctxConn.Read: p9 v0.3.0 can panic in connState.stop
		// ("WaitGroup is reused before previous Wait has returned")
		// when a connection ends; one connection must not take PID 1
		// down.
		if r := recover(); r != nil {
			s.opt.Logf("9p connection ended with a panic in p9: %v", r)
		}
	}()
	srv.Handle(cc, cc)
}

// conn is one 9P connection: ctx ends when the connection's reader sees
// EOF or an error, which ends every blocking read on it (p9 waits for all
// in-flight requests before it closes the fids of a dead connection).
type conn struct {
	s    *Server
	ctx  context.Context
	wire wireState // Tflush/Tclunk tracking, see wire.go
}

// ctxConn cancels the connection's context when reading from it fails,
// which is how blocking reads learn that their client is gone, and shows
// every byte read to the sniffer (wire.go), which is how they learn of
// Tflush and Tclunk.
type ctxConn struct {
	io.ReadWriteCloser
	cancel context.CancelFunc
	once   sync.Once
	c      *conn
	sniff  sniffer // used only under p9's receive lock
}

func (c *ctxConn) Read(b []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(b)
	if n > 0 {
		c.sniff.feed(c.c, b[:n])
	}
	if err != nil {
		c.once.Do(c.cancel)
		// p9 v0.3.0 starts each extra receiver with `go
		// handleRequests()`, whose pendingWg.Add(1) runs in the new
		// goroutine; if this (the last) read fails before it has run,
		// connState.stop's pendingWg.Wait races with that Add (a
		// WaitGroup misuse panic). Give such a goroutine time to reach
		// its Add — it then finds recvShutdown and returns — before
		// reporting the end. Costs 20ms once per connection.
		runtime.Gosched()
		time.Sleep(20 * time.Millisecond)
	}
	return n, err
}

func (c *ctxConn) Close() error {
	c.once.Do(c.cancel)
	return c.ReadWriteCloser.Close()
}

type logger func(format string, a ...any)

func (l logger) Printf(format string, a ...any) { l(format, a...) }
func (l logger) Print(a ...any)                 { l("%v", a...) }

type attacher struct{ c *conn }

// Attach implements p9.Attacher.Attach.
func (a *attacher) Attach() (p9.File, error) { return newRootDir(a.c), nil }

func (s *Server) fsRoot(c *conn) (*fsFile, error) { return newFSRoot(c, s.root) }

// Dial attaches to a guest agent over conn (for the host daemon: conn
// is the VMM's hybrid vsock after "CONNECT 564"). The returned file is
// the agent's root. A blocking read (stdout, stderr, wait) ends when its
// file is closed (Tclunk) or the client is closed. It holds the p9
// server's rename lock for its connection while it waits, so use one
// connection for streaming procs/ files and another for fs/ work that
// renames.
func Dial(conn net.Conn) (*p9.Client, p9.File, error) {
	c, err := p9.NewClient(conn, p9.WithMessageSize(1<<20))
	if err != nil {
		return nil, nil, err
	}
	root, err := c.Attach("/")
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, root, nil
}
