package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"sandfs/fs/ctlfs"
	"sandfs/fs/ninep"
)

func init() {
	register("mount", "mount a sandfs 9P server (local or remote) with FUSE", runMount)
}

func runMount(args []string) int {
	fl := flag.NewFlagSet("mount", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fl)
	addr := &cf.addr
	debug := fl.Bool("debug", false, "log at debug level")
	// Accept the mount point before or after the flags.
	var mnt string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		mnt, args = args[0], args[1:]
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if mnt == "" && fl.NArg() == 1 {
		mnt = fl.Arg(0)
	} else if fl.NArg() != 0 || mnt == "" {
		fmt.Fprintln(os.Stderr, "usage: sandfs mount MNT [--addr unix:PATH|tcp:HOST:PORT] [--token-file F]")
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	token, err := cf.token()
	if err != nil {
		log.Error("mount: " + err.Error())
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r, err := ninep.Dial(dctx, *addr, token)
	cancel()
	if err != nil {
		log.Error("mount: " + err.Error())
		return 1
	}
	defer r.Close()
	r.SetBlocking(ctlfs.IsStdin) // the writes an interrupt may end (fusefs)
	m, err := mountTree(mnt, r.Root(), log)
	if err != nil {
		log.Error("mount: " + err.Error())
		return 1
	}
	log.Info("mount: serving", "addr", *addr, "dir", mnt)
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-ctx.Done():
		log.Info("mount: signal received, unmounting")
		if err := m.Unmount(); err != nil {
			log.Error("mount: unmount: " + err.Error())
			return 1
		}
	case <-done:
		log.Info("mount: unmounted")
	case <-r.Done():
		log.Error("mount: connection to the server lost, unmounting", "addr", *addr)
		if err := m.Unmount(); err != nil {
			log.Error("mount: unmount: " + err.Error())
		}
		return 1
	}
	return 0
}
