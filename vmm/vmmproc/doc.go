// Package vmmproc is the VMM process, `sandfs vmm`: one per sandbox, it
// runs one machine (package vmm) from a Config, serves its control to the
// daemon on a unix socket, and confines itself (jail, uid drop, seccomp).
// It also holds the daemon's side: Launch starts the process (namespaces,
// cgroup, start gate) and returns a *Process, the client of its control.
//
//	main.go        Main and run: build, confine, start, serve (the process)
//	config.go      Config, the JSON the daemon hands the process
//	devices.go     the virtio devices of a Config, added to the machine
//	control.go     the control server
//	launch.go      Launch and reap (the daemon's side)
//	client.go      Process: the control requests, Stop, Wait
//	jail.go        the process's root (bind mounts, pivot_root)
//	confine.go     cgroup, start gate, uid drop, then seccomp
//	seccomp.go     the syscall allowlist, compiled to classic BPF
//	logging.go     capped logs, the rate-limited log handler
//
// # Process model and control protocol
//
// The daemon runs one `sandfs vmm -config FILE` process per sandbox
// (vmmproc.Launch starts it and returns a *Process). The process reads its
// Config (JSON), builds the machine, and serves a line protocol on the
// control socket it inherits as fd 3 (a listening unix socket). One request
// per line, in the ctl message grammar (package msg: blanks between words,
// single quotes, at most 4 KiB; verbs in controlVerbs, control.go), one
// reply line per request:
//
//	request          reply
//	status           ok <state> cpus=<n> mem=<bytes> pid=<pid>   state: running|paused|ended:<reason>
//	pause            ok                 vCPUs parked, devices quiesced
//	resume           ok
//	save <dir>       ok <dir>           paused only: <dir>/state.json + <dir>/mem
//	stop             ok                 the process then exits
//	(any failure)    err <ERRNO> <verb>: <reason>    e.g. err EINVAL ctl: unknown verb "bogus"
//
// The errno travels as its name (msg.Line); the client returns a
// *msg.Error with errno and text (msg.ParseLine), so the daemon maps it
// like any other error.
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
//	p.Stop(ctx)                 // "stop", then SIGKILL to the group after the deadline (5 s default)
//	<-p.Done(); reason, err := p.Wait(); p.Err(); p.Pid(); p.Kill()
//
// A restore is Launch with Config.Restore = snapDir (and StartPaused to
// keep it paused): same devices, same order.
//
// # Confinement
//
// Launch: namespaces (mount, PID, IPC, network, UTS), an empty
// environment, the cgroup (confine.go, package cgroup). The process: its
// root on Jail.Root, entered before it opens anything there (jail.go);
// then, once the machine exists, the uid drop and the seccomp filter
// (confine.go, seccomp.go). docs/vmm.md, "The jail", lists what a
// compromised VMM can still reach.
package vmmproc
