// Package guest is the in-guest agent of sandfs, run as PID 1 by
// ./tools/sandfs-init: the init duties (Mounts, SetClock, SetHostname,
// Network, EnsureUsers, zombie reaping) and a file tree (Server) that the
// host daemon binds into /sandboxes/<id>/. It speaks only files and holds
// no policy. The tree is made of package fs's nodes (Dir, Opener, Source,
// Sink, Handle, fs.Table) and served over 9P2000.L by package fs/ninep's
// server, the daemon's own: one node model, one flush design on both
// sides of vsock.
//
// # Boot
//
// sandfs-init mounts proc, sysfs, devtmpfs, devpts, /dev/shm, /tmp, /run
// and cgroup2 (see mounts), reads /proc/cmdline (ParseCmdline: sandfs.ip,
// sandfs.gw, sandfs.dns, sandfs.hostname, sandfs.iface, sandfs.mtu,
// sandfs.time, sandfs.port, sandfs.debug), sets clock, host name, lo and
// eth0 (rtnetlink), makes sure root (0) and user (1000, /home/user)
// exist, then serves 9P on vsock port 564, accepting connections from the
// host (CID 2) only, so guest processes cannot reach it over vsock
// loopback. Port 565 (hybrid.CtlPort, host only too) takes ctl's
// messages as lines without 9P (ctllines.go): the host's refresh of a
// restored guest in one exchange.
// Failures are logged to the console and skipped; PID 1 never exits.
//
// # Tree
//
//	ctl                  write: one agent verb; read: "boot=<unix ns> now=<unix ns>"
//	err                  text of the last failed write to ctl
//	fs/                  the guest's root file system, read/write (passthrough)
//	procs/clone          open: a new process slot n; read: "n\n"; write: ctl verbs
//	procs/<n>/ctl        write: one verb; read: "n state pid\n"
//	procs/<n>/stdin      write: bytes to the process's stdin (or its terminal)
//	procs/<n>/stdout     read: blocking stream of output, EOF at the end
//	procs/<n>/stderr     read: the same for stderr (empty with a pty)
//	procs/<n>/status     read: one line, see below
//	procs/<n>/wait       read: blocks until the process ends, then the status line
//	procs/<n>/err        read: text of the last failed ctl write, or empty
//	procs/<n>/config     read: the ctl messages that set it up, one per line, ending
//	                     with its start line (replayable into a new clone; E2B List)
//	watch                each open is one inotify watch: write 'watch PATH [recursive]';
//	                     read: blocking stream of event lines, "create a.txt",
//	                     "write sub/b", "remove 'c d'", "overflow" (watch.go)
//
// Agent ctl verbs (agentVerbs), for after a snapshot restore or clone:
//
//	time UNIXNS                  set the clock
//	hostname NAME                host name, /etc/hostname, /etc/hosts
//	net IFACE ADDR/PREFIX [GW]   address (replace), link up, default route
//	dns IP...                    /etc/resolv.conf
//	entropy HEX                  32..256 bytes into the kernel RNG
//	                             (RNDADDENTROPY, credited), then
//	                             RNDRESEEDCRNG: a restored guest's CRNG
//	                             differs from its template's and siblings'
//
// Process ctl verbs (ctlVerbs), one message per write; user, cwd, env,
// pty and stdin only in state new (EBUSY otherwise):
//
//	user NAME|UID[:GID]   run as (default root); groups from /etc/group;
//	                      HOME USER LOGNAME SHELL from /etc/passwd
//	cwd DIR               default the user's home (or /); ~ and relative
//	                      paths are against home
//	env K=V...            more environment, after PATH HOME USER LOGNAME
//	                      SHELL (and TERM=xterm-256color with a pty); later wins
//	pty on|off            new pseudo-terminal, controlling tty, new session
//	stdin on|off          on (default): a pipe fed by the stdin file; off: /dev/null
//	tag TEXT              a label kept with the process (E2B's tag), shown in config
//	size ROWS COLS        terminal size, default 24 80; resizes a running pty
//	start CMD [ARG...]    start (CMD looked up in the process's PATH unless it has a /)
//	exec 'SHELL COMMAND'  start /bin/sh -c 'SHELL COMMAND'
//	signal SIG [group]    TERM KILL INT HUP QUIT USR1 USR2 STOP CONT WINCH …,
//	                      with or without SIG, or a number; 'group' signals
//	                      the process group (every process runs in its own
//	                      session); EBUSY unless running
//	closestdin            close the stdin pipe (with a pty: send ^D); EBUSY unless running
//	free                  forget a finished or never-started slot now; EBUSY while running
//
// Message syntax: package msg's grammar (sandfs/ctl/msg), shared with the
// host's ctl files, under Script rules: words separated by blanks; single
// quotes quote, and two single quotes inside quotes stand for one (rc(1));
// quoted parts may hold newlines (scripts); one trailing newline allowed;
// an unquoted newline (a second message), NUL bytes and messages over
// 64 KiB are refused (EINVAL, E2BIG). msg.Quote builds arguments. Errors:
// EINVAL malformed, unknown verb, wrong argument count (the same words as
// the host's) or value; EBUSY wrong state (the text names the state
// needed); ENOENT no such user, cwd, command or slot; ENOTDIR cwd not a
// directory; EACCES command not executable (or exec refused for the user);
// EPIPE stdin closed. Every failed write
// leaves its text, `verb: reason "input"`, in the err file beside it.
//
// Status line (status, wait), fields in fixed order, new ones only at the
// end; clients should read key=value pairs:
//
//	3 new
//	3 running pid=812
//	3 exited code=0 pid=812
//	3 killed signal=9 pid=812
//	3 failed errno=2            start failed: nothing ran (see err)
//
// States: new → running → exited | killed; new → failed.
//
// # Streams
//
// stdout and stderr are pipes, not files: reads ignore the offset and
// consume; concurrent readers share one stream. Output is buffered in the
// agent from the moment the process starts, so nothing is lost before a
// reader opens it. Up to 1 MiB per stream is held unread; beyond that the
// agent stops reading the pipe and the process blocks in write(2), as on
// a full pipe: nothing is dropped, memory stays bounded, and a process
// whose output nobody reads stalls after 1 MiB. A stream ends (a zero-byte
// read) once the process's end of the pipe is closed and everything is
// read, which for a process that left children holding it (sh -c 'x &')
// is when they close it too. With a pty, stdout carries the terminal and
// stderr ends at once. Data is binary-safe and ordered.
//
// # Blocking reads
//
// stdout, stderr and wait block until there is something to return, and
// end when their context ends, as every blocking read of package fs
// does: data arrives; the stream ends or the process exits (wait); the
// slot is freed (EOF); or the read's context ends (EINTR), which package
// ninep's server does when the read's tag is flushed (Tflush), its fid
// clunked or removed, or its connection ends (see fs/ninep's doc: reads
// are matched by path, so two blocked reads of one file on one
// connection end together). A host abandons a read by flushing it or by
// closing the file (the p9 client sends no Tflush). Linux's 9p client
// waits killably: SIGINT does not interrupt a read on a 9p mount,
// SIGKILL sends Tflush (TestKernel9P, in the lab);
// TestFlushEndsBlockedRead and TestClunkEndsBlockedRead check both.
//
// A stdin write that blocks on a full pipe (the process does not read)
// ends the same ways (its handle is an fs.BlockingWriter), returning the
// count written so far (EINTR if none), and with EPIPE when the process
// exits or closestdin closes the pipe.
//
// The agent's client is root (Server.ServeConn): the modes the tree
// shows say what each file offers (stdin is write-only, status
// read-only); opening for anything else is EACCES.
//
// A blocking read holds its connection's p9 rename lock while it waits
// (Trenameat and Tremove wait for it), so do fs/ renames on a connection
// that does not stream.
//
// # Lifetimes
//
// Process records belong to the Server, never to a fid or a connection:
// a process outlives the connection that started it, and any later
// connection can read its files. A slot is freed (its directory vanishes,
// blocked readers get EOF) when nothing has any of its files open and
// either it never ran (new, failed: at the last close, so an abandoned
// clone costs nothing) or it ended more than DefaultRetention (5 minutes)
// ago; or at once by `free`. Slot numbers are never reused.
//
// # fs/
//
// A passthrough of the server's root ("/" in the guest) confined to it
// (fsTree): a node is a path below the root, reached again by every
// operation with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) and
// O_NOFOLLOW, so no node holds a descriptor; names "", ".", ".." and
// names with "/" are refused; symlinks are never followed by the server
// (walking one yields the link; opening it is ELOOP; Readlink returns
// its text); creation uses O_CREAT|O_EXCL|O_NOFOLLOW, and changes go
// through the node's own descriptor (via /proc/self/fd) or *at calls
// with AT_SYMLINK_NOFOLLOW. Nodes show the files' real owners, modes,
// inode numbers (the QID paths) and times. Modes are applied exactly
// (no umask); new files get the uid/gid the client sends (the client is
// root; fs/ninep applies a privileged client's), else the agent's.
// Supported, through fs's optional interfaces (fs/mutate.go,
// fs/posix.go): walk, open, create, mkdir, read, write, setattr (mode,
// owner, size, times), rename, unlink, readdir, symlink, readlink, link,
// mknod, getattr, statfs, fsync. Not supported: xattrs (ENOSYS) and
// locks. A fid walked to a file that is then renamed names the old path
// (nodes are paths, as the host's binds are).
//
// # E2B process API on these files
//
//	Start          clone; user U; cwd D (if given); env K=V... (sandbox
//	               envs, then the request's); pty on + size R C (pty) or
//	               stdin off (stdin false); tag T; start CMD ARGS...
//	               → "start" event: pid= from status; ENOENT cwd → the
//	               SDK's invalid_argument (text in err)
//	data events    read stdout and stderr until EOF (pty: stdout only)
//	end event      read wait: exited code=C → exitCode C; killed
//	               signal=S → exitCode -1, "signal: killed"
//	Connect(pid)   find the slot whose status has pid=P, read as above
//	List           every procs/<n>/ that is running: config + status
//	SendInput      write stdin;  CloseStdin: closestdin
//	SendSignal     signal KILL (or TERM);  Update(pty size): size R C
//	timeoutMs      the adapter writes signal KILL when it elapses
//
// # Host helpers
//
// Dial attaches a p9 client over a stream to the agent (from the host,
// hybrid.Dial's hybrid-vsock CONNECT handshake). After a snapshot
// restore, retry: the guest may drop the first connection while its vsock
// transport resets.
//
// # Reaping
//
// One reaper (reaper.go) is the only caller of wait4: it reaps every
// child (PID 1 inherits orphans) and hands the status of the processes
// the agent started to their records. Nothing else in the program may
// wait for children.
//
// # Lock order
//
// proc.mu before procTable.mu (free removes the slot from the table while
// holding its proc.mu); proc.mu before reaper.mu (start forks under both);
// the reaper calls exit callbacks after dropping reaper.mu. sfs.FDHandle.mu
// and Server.mu are leaves.
package guest
