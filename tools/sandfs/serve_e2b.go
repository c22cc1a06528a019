package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"sandfs/e2b"
	"sandfs/fs/ninep"
)

// e2bMaxConns bounds the adapter's open connections (the SDK keeps a
// few per sandbox; a streaming command holds one).
const e2bMaxConns = 1024

// startE2B serves the E2B adapter (package e2b) on addr until ctx ends;
// it reaches the tree through srv in process. wg counts its goroutine;
// a listener that fails sends its error to errc.
func startE2B(ctx context.Context, log *slog.Logger, c serveConfig, srv *ninep.Server, wg *sync.WaitGroup, errc chan<- error) error {
	keys, generated, err := e2b.LoadKeys(c.e2bKeys, filepath.Join(c.state, "e2b-key"))
	if err != nil {
		return err
	}
	if generated != "" {
		fmt.Fprintf(os.Stderr, "sandfs serve: E2B API key (in %s): %s\n", filepath.Join(c.state, "e2b-key"), generated)
	}
	reg, err := e2b.LoadRegistry(filepath.Join(c.state, "e2b.json"))
	if err != nil {
		return err
	}
	a := e2b.New(e2b.Config{Keys: keys, Dial: e2b.PipeDialer(ctx, srv), Registry: reg, Log: log})
	l, err := net.Listen("tcp", c.e2b)
	if err != nil {
		return fmt.Errorf("e2b: %w", err)
	}
	// Clients are hostile: bounded connections (netutil.LimitListener)
	// and idle keep-alives closed, so none can hold the daemon's fds.
	l = netutil.LimitListener(l, e2bMaxConns)
	hs := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("serve: E2B adapter listening", "addr", l.Addr().String(), "keys", len(keys))
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer a.Close()
		stop := context.AfterFunc(ctx, func() { hs.Close() })
		defer stop()
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("e2b %s: %w", c.e2b, err)
		}
	}()
	return nil
}
