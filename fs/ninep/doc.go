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
// pending Tread, or a Tclunk/Tremove of a fid, cancels the reads blocked
// on that fid's path on this connection, which then fail with EINTR.
// Reads are matched by path, not by fid (p9 does not tell a File its fid),
// so two blocked reads of the same file on one connection end together.
//
// Access: with a token, the attach name (aname) must equal the token; an
// attach without it, or with another name, fails with EPERM. Without a
// token (the unix socket, protected by its file mode) aname must be empty.
//
// QID paths come from one qids.PathGenerator per Server, one per tree
// path, so a file keeps its QID path across walks and connections.
//
// Lock order: Server.mu and conn.mu are leaves; no File method holds
// either while calling into the tree.
package ninep
