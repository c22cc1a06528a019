package fs

import (
	"bytes"
	"context"
	iofs "io/fs"
	"syscall"
	"time"

	"sandfs/ctl/cred"
)

// Node is one file or directory of the tree. Every node can say what it
// is; what it can do is told by the other interfaces it implements: Dir
// for directories; Opener, Source or Sink for files.
type Node interface {
	// Stat returns the node's attributes. It is called often (every
	// lookup and getattr) and must be cheap.
	Stat(ctx context.Context) (Attr, error)
}

// Attr is what a transport needs to describe a node.
type Attr struct {
	Mode iofs.FileMode // iofs.ModeDir or 0 (regular file), plus permission bits
	Size int64         // 0 for generated files: their text exists only once opened
	// Mtime is the modification time; the zero value means "when the
	// tree was built".
	Mtime time.Time
	// Owner is the uid and gid the node belongs to; nil: the owner of
	// the directory it is in (Chan fills it in). The root belongs to the
	// daemon's user and the creators' group; a sandbox's directory to
	// the sandbox's owner, and so everything under it.
	Owner *cred.Owner

	// The rest is shown by trees that pass a real file system through
	// (posix.go); zero elsewhere. Ino, when set, is the file's identity
	// (the 9P QID path), the same for every name it has.
	Ino          uint64
	Nlink        uint64
	Rdev         uint64
	Blocks       int64 // 512-byte blocks allocated
	Atime, Ctime time.Time
}

// Dir is a directory: a name space one level deep.
type Dir interface {
	Node
	// Lookup returns the child called name, or an error whose errno is
	// ENOENT when there is none.
	Lookup(ctx context.Context, name string) (Node, error)
	// List returns the children in a stable order.
	List(ctx context.Context) ([]Dirent, error)
}

// Dirent is one entry of a directory listing.
type Dirent struct {
	Name string
	Mode iofs.FileMode // only the type bits (iofs.ModeDir, iofs.ModeSymlink…) matter
	Ino  uint64        // as Attr.Ino; 0: none
}

// Opener is a file with per-open state: each Open returns a new Handle
// that owns whatever the open allocated (the /clone file allocates a
// sandbox). Files without per-open state implement Source and/or Sink
// instead and Open gives them a standard handle.
type Opener interface {
	Open(ctx context.Context, flags OpenFlags) (Handle, error)
}

// Source is a readable generated file: Text writes the file's whole
// content into b. It is called at the first read of an open and again
// whenever a read restarts at offset 0 (see TextHandle).
type Source interface {
	Text(ctx context.Context, b *bytes.Buffer) error
}

// Sink is a file that accepts messages: one write is one message.
type Sink interface {
	Message(ctx context.Context, m []byte) error
}

// Handle is one open file. Read and Write may be called concurrently;
// Close is called once, when the last reference to the open is dropped
// (FUSE release, 9P clunk), possibly while a Read is still blocked:
// such a Read must then return promptly.
type Handle interface {
	// Read reads at off. A blocking read ends when ctx is done (FUSE
	// interrupt, 9P flush or clunk, the connection ending) and then
	// returns ctx.Err().
	Read(ctx context.Context, p []byte, off int64) (int, error)
	// Write writes p at off. Message files ignore off: every write
	// is one message.
	Write(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// ReadPasser is a Handle whose reads a client in another process may
// make itself, on a descriptor of its own (fs/ninep's passed reads, for
// the VMM's virtio-9p device): a file of a real file system, open
// read-only.
type ReadPasser interface {
	// DupReadOnly returns a new descriptor of the open file, which the
	// caller closes, and the file's size, if the file is a regular file
	// open read-only; else ok is false.
	DupReadOnly() (fd int, size int64, ok bool)
}

// FilePasser is a Handle whose open file a client in another process
// may read, write and sync itself, on a descriptor of its own (fs/ninep's
// passed files, for the VMM's virtio-9p device): a regular file of a
// real file system.
type FilePasser interface {
	// DupFile returns a new descriptor of the open file, with the
	// open's access mode, which the caller closes, if it is a regular
	// file; else ok is false.
	DupFile() (fd int, ok bool)
}

// OpenFlags are the access mode bits of open(2) that the tree uses.
type OpenFlags int

// Access modes, as in open(2).
const (
	ReadOnly  OpenFlags = syscall.O_RDONLY
	WriteOnly OpenFlags = syscall.O_WRONLY
	ReadWrite OpenFlags = syscall.O_RDWR
)

// Readable and Writable report the access the open asked for.
func (f OpenFlags) Readable() bool { return f&syscall.O_ACCMODE != WriteOnly }
func (f OpenFlags) Writable() bool { return f&syscall.O_ACCMODE != ReadOnly }

// Open opens node n for the transports: an Opener opens itself; a
// Source and/or Sink gets a standard handle (TextHandle, message writes).
// Asking for an access the node does not offer fails with EACCES, a
// directory with EISDIR.
func Open(ctx context.Context, n Node, flags OpenFlags) (Handle, error) {
	if _, ok := n.(Dir); ok {
		return nil, syscall.EISDIR // transports list directories themselves
	}
	if o, ok := n.(Opener); ok {
		return o.Open(ctx, flags)
	}
	src, canRead := n.(Source)
	sink, canWrite := n.(Sink)
	if (flags.Readable() && !canRead) || (flags.Writable() && !canWrite) {
		return nil, errAccess
	}
	return &fileHandle{text: TextHandle{Src: src}, sink: sink}, nil
}

// fileHandle is the standard handle of a Source and/or Sink.
type fileHandle struct {
	text TextHandle
	sink Sink // nil: not writable
}

// Read implements Handle.Read.
func (h *fileHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	return h.text.Read(ctx, p, off)
}

// Write implements Handle.Write.
func (h *fileHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	if h.sink == nil {
		return 0, errBadFD
	}
	if err := h.sink.Message(ctx, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close implements Handle.Close.
func (h *fileHandle) Close() error { return nil }

// Errors of the node model itself.
var (
	errNotFound error = syscall.ENOENT // no such name in a directory
	errAccess   error = syscall.EACCES // open for an access the file does not offer
	errBadFD    error = syscall.EBADF  // write on a read-only open, or the reverse
)
