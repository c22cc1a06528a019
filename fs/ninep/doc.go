// Package ninep serves an fs tree over 9P2000.L (github.com/hugelgupf/p9)
// and, the other way round, presents a remote 9P server as fs nodes
// (Remote), which is what `sandfs mount` puts behind FUSE and what a
// sandbox directory will use to bind a guest agent's tree.
//
// # Server
//
// One p9.Server per connection, so that a request blocked in a read can
// never hold a lock another connection needs (p9 holds its rename lock
// across File calls). Each connection has a context, cancelled when the
// connection ends; every File method runs under it.
//
// p9.File methods get no context and p9 answers Tflush only after the
// flushed request has finished (p9/server.go, WaitTag). A blocking read
// (wait) must therefore end by itself when the client gives up. The
// connection watches its incoming frames (frames.go): a Tflush of a
// pending Tread, or a Tclunk/Tremove of the fid it reads, cancels that
// read (at once; if its handler has not begun yet, as it begins), which
// then fails with EINTR. Writes to an sfs.BlockingWriter (a guest's
// stdin) are tracked and cancelled as reads are; other writes (ctl
// messages) run to their end. Reads are matched by tag: p9 tells a
// File neither the tag nor the fid, so the frame p9 decodes carries the
// tag in place of the offset, and ReadAt and WriteAt take the client's
// offset back from the connection (conn.begin); other reads of the same
// file, on other fids or tags, go on.
//
// The connection learns which fids exist from p9's replies (Rattach,
// Rwalk), not from the requests, so it holds a path only for a fid p9
// holds: nothing for a client that never attached, nothing for a walk
// that failed.
//
// Access: with a token, the attach name (aname) must equal the token
// (compared in constant time, as SHA-256 sums); an attach without it, or
// with another name, fails with EPERM. Without a token (the unix socket)
// any attach succeeds. Either way every request is then checked against
// the modes the tree shows (sfs.Chan) as the connection's identity
// (peer.go): root for a token, the peer's uid, gid and groups on a unix
// socket (SO_PEERCRED, SO_PEERGROUPS), nobody otherwise. The uname and
// uid of a Tattach, and those of a Tlcreate or Tmkdir, are ignored.
//
// Before its first successful attach a client is anonymous, and bounded
// (limits.go): frames of at most 8 KiB, at most 16 of them, only
// Tversion, Tauth, Tattach, Tflush and Tclunk, and an attach within 10 s
// of connecting; breaking any of these closes the connection, logged
// with the reason. A listener holds at most 8 unattached connections per
// remote host (IPv4 address, IPv6 /64) and 64 in all; a connection over
// either limit is closed at accept (logged at most once a second). A
// Tversion's msize is lowered to 512 KiB, the largest frame after attach.
// Accept errors that pass (EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED)
// are retried with a backoff instead of ending the listener. Attached,
// a connection holds at most 2^20 fids and 4096 of them open
// (fidlimit.go), and the connections of one unprivileged user of the
// socket share a budget of the same size (budget.go).
//
// QID paths (ident.go): a generated file's come from one
// qids.PathGenerator per Server, one per tree path, so a file keeps its
// QID path across walks and connections; a file of a real file system
// passed through shows its inode number, mixed with its scope's path
// where the tree holds several such file systems.
//
// # Client
//
// Every p9 client of the daemon (Remote's sessions, package client) is
// made with NewClient (p9client.go): p9 shares its response slots among
// all clients of a process, and a send that fails on one connection
// would otherwise leave a stale error for a request on another.
//
// Lock order: Server.mu and conn.mu are leaves; no File method holds
// either while calling into the tree.
package ninep
