// Package vmmproc is the VMM process, `sandfs vmm`: one per sandbox, it
// runs one machine (package vmm) from a Config, serves its control to the
// daemon on a unix socket, and confines itself (jail, uid drop, seccomp).
// It also holds the daemon's side: Launch starts the process (namespaces,
// cgroup, start gate) and returns a *Process, the client of its control.
//
//	main.go        Main and run: build, confine, start, serve (the process)
//	config.go      Config, the JSON the daemon hands the process
//	devices.go     the virtio devices of a Config, added to the machine
//	control.go     the control tree and its server; ctlfile.go, statusfile.go, errfile.go its files
//	launch.go      Launch and reap (the daemon's side)
//	spare.go       Spares: processes started ahead that a launch hands its files to; sparemain.go their side
//	client.go      Process: the control requests, Stop, Wait
//	adopt.go       Adopt and EndOrphan: a Detached process found again after a daemon restart
//	session.go     the client's 9P session with the control tree (fs/ninep's Remote)
//	jail.go        the process's root (bind mounts, pivot_root)
//	confine.go     cgroup, start gate, uid drop, then seccomp
//	seccomp.go     the syscall allowlist, compiled to classic BPF
//	logging.go     capped logs, the rate-limited log handler
//
// # Process model and control tree
//
// The daemon runs one `sandfs vmm -config FILE` process per sandbox
// (vmmproc.Launch starts it and returns a *Process). The process reads its
// Config (JSON), builds the machine, and serves its control as a small
// file tree (control.go: package fs's node model) over 9P2000.L (fs/ninep's
// server) on the control socket it inherits as fd 3 (a listening unix
// socket):
//
//	/ctl      write: pause | resume | save <dir> | stop (controlVerbs, package msg's grammar)
//	          read:  <id> <state>
//	/status   <state> cpus=<n> mem=<bytes> pid=<pid>   state: running|paused|ended:<reason>
//	/err      the text of the last failed ctl write, e.g. save: machine is not paused
//
// A refused write fails with its errno (Rlerror) and leaves its text in
// err; the client (session.go) reads it back and returns a *msg.Error
// with both, so the daemon maps it like any other error.
//
// The process's exit status says why it ended: 0 stop, 10 guest reset
// (reboot, panic with panic=-1, triple fault), 11 poweroff, 12 crash,
// 1 VMM error (its text is the last "vmm: " line of stderr), 2 usage; it
// also logs "vmm: exit reason=<reason>" last. A seccomp violation kills it
// with SIGSYS. vmmproc.Process.Wait returns (ExitReason, error) from these.
//
// # Client (the daemon's side)
//
//	p, err := vmmproc.Launch(ctx, vmmproc.Config{Kernel: k, MemBytes: 256 << 20, CPUs: 1,
//		Disks: ..., Vsock: ..., RNG: true,
//		Socket: dir + "/vmm.sock", Console: dir + "/console", LogFile: dir + "/vmm.log",
//		Jail: vmmproc.JailConfig{Namespaces: true, Seccomp: true, Cgroup: "sandfs/" + id,
//			Root: dir + "/root", Work: dir + "/work", UID: uid, GID: uid}})
//	p.Pause(ctx); p.Save(ctx, dir+"/work/snap"); p.Resume(ctx); st, _ := p.Status(ctx)
//	p.Stop(ctx)                 // write stop, hang up, then SIGKILL to the group after the deadline (5 s default)
//	<-p.Done(); reason, err := p.Wait(); p.Err(); p.Pid(); p.Kill()
//
// A restore is Launch with Config.Restore = snapDir (and StartPaused to
// keep it paused): same devices, same order.
//
// A Detached process (Config.Detached) outlives the daemon: its own
// session, no parent-death signal, its identity (pid, start time, boot
// id) in <socket>.pid before it runs. A later daemon adopts it:
//
//	p, err := vmmproc.Adopt(ctx, dir+"/vmm.sock")  // ErrGone: nothing runs there
//	found, err := vmmproc.EndOrphan(dir + "/vmm.sock") // stop one no sandbox owns
//
// # Confinement
//
// Launch: namespaces (mount, PID, IPC, network, UTS), an empty
// environment, the cgroup (confine.go, package cgroup). The process: its
// root on Jail.Root, entered before it opens anything there (jail.go);
// then, once the machine exists, the uid drop and the seccomp filter
// (confine.go, seccomp.go). docs/vmm.md, "The jail", lists what a
// compromised VMM can still reach.
//
// Lock order: Process.mu (one control request at a time, and the
// session's open files) → the locks of fs/ninep's Remote (leaves). In the
// process, control.mu and connSet.mu are leaves; the machine's own locks
// are taken only by calling it (vmm's lock order).
package vmmproc
