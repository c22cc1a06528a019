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

	"sandfs/fs/ninep"
)

func init() {
	register("mount", "mount a sandfs 9P server (local or remote) with FUSE", runMount)
}

func runMount(args []string) int {
	fl := flag.NewFlagSet("mount", flag.ContinueOnError)
	addr := fl.String("addr", "unix:/run/sandfs/sandfs.sock", "9P server, unix:PATH or tcp:HOST:PORT")
	token := fl.String("token", os.Getenv("SANDFS_TOKEN"), "attach token (TCP only; default $SANDFS_TOKEN)")
	tokenFile := fl.String("token-file", "", "read the token from this file")
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
		fmt.Fprintln(os.Stderr, "usage: sandfs mount MNT [--addr unix:PATH|tcp:HOST:PORT] [--token T | --token-file F]")
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			log.Error("mount: " + err.Error())
			return 1
		}
		*token = strings.TrimSpace(string(b))
	}

	if strings.HasPrefix(*addr, "unix:") {
		// The unix socket is guarded by its mode: its attach name
		// must be empty, whatever $SANDFS_TOKEN says.
		*token = ""
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r, err := ninep.Dial(dctx, *addr, *token)
	cancel()
	if err != nil {
		log.Error("mount: " + err.Error())
		return 1
	}
	defer r.Close()
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
