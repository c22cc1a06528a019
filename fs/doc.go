// Package fs is a transport-neutral node model for synthetic file trees:
// nodes (Node, Dir, Opener, Source, Sink, Handle), directory tables
// (Table), the standard handle of text and message files (TextHandle),
// optional mutation interfaces (Creator, Mkdirer, Remover, Truncater),
// and the one access check (Chan). It knows nothing of sandboxes: the
// daemon's tree is package fs/ctlfs, and the guest agent serves its own
// tree with the same model. Adapters turn a tree into 9P (fs/ninep, which
// also presents a remote 9P tree as nodes: ninep.Remote) and FUSE
// (fs/fusefs).
//
// Of sandfs it imports only ctl/cred (who asks, who owns) and, through
// its adapters, ctl/msg (the errno of an error): TestNoControlPlane keeps
// it so.
//
// Writing a tree: a file kind is one type (a Source for text, a Sink for
// messages, an Opener for per-open state); a fixed directory is one Table
// literal, a dynamic one a type implementing Dir (Lookup and List).
//
// Lifetimes: nodes are cheap values made at every lookup and hold no
// per-open state; handles own what an open allocated and are closed once
// (FUSE release, 9P clunk), possibly while a Read still blocks, which
// must then return. Blocking reads end when their context ends: the FUSE
// request is interrupted, the 9P read is flushed or its fid clunked, or
// the connection ends.
//
// Access (chan.go): every node shows an owner, a group and a mode (Attr;
// a node without an owner of its own is its directory's). The adapters
// reach nodes only through Chan, whose methods check the caller
// (cred.Of of the request's context: the FUSE caller, the 9P
// connection's peer or token) against those modes, so both transports
// enforce one rule. In-process callers (Walk, Open) check nothing.
//
// Errors: a node returns any error; the adapters send its errno
// (msg.Errno: a *msg.Error's, a syscall.Errno in the chain, EIO
// otherwise).
//
// Lock order: TextHandle.mu is a leaf, but it is held across Source.Text,
// which may call into whatever the tree presents.
package fs
