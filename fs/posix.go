package fs

import (
	"context"
	iofs "io/fs"
	"time"
)

// Optional interfaces for trees that pass a real file system through (a
// guest agent's fs/, package guest): the operations of POSIX beyond
// mutate.go's. The generated files of the tree have none of them, and
// Chan refuses each operation on a node without its interface (EPERM;
// EINVAL for Readlink of a node that is no link).
//
// Such trees show more of a file in Attr (Ino, Nlink, Rdev, Blocks,
// Atime, Ctime, and the type bits of Mode: ModeSymlink, ModeDevice,
// ModeCharDevice, ModeNamedPipe, ModeSocket, ModeSetuid, ModeSetgid,
// ModeSticky); the generated tree leaves them zero.

// Renamer is a directory whose entries can be moved.
type Renamer interface {
	// Rename moves the entry oldName to newName in newDir (a directory
	// of the same tree: EXDEV otherwise), replacing what is there as
	// rename(2) does.
	Rename(ctx context.Context, oldName string, newDir Node, newName string) error
}

// Linker is a directory in which hard links can be made.
type Linker interface {
	// Link makes name a new link to target (a file of the same tree:
	// EXDEV otherwise).
	Link(ctx context.Context, target Node, name string) error
}

// Symlinker is a directory in which symbolic links can be made.
type Symlinker interface {
	// Symlink makes name a symbolic link whose text is target (stored
	// as given, never resolved).
	Symlink(ctx context.Context, target, name string) (Node, error)
}

// Readlinker is a symbolic link.
type Readlinker interface {
	// Readlink returns the link's text.
	Readlink(ctx context.Context) (string, error)
}

// Mknoder is a directory in which special files can be made.
type Mknoder interface {
	// Mknod makes name with mode (type and permission bits: a device,
	// named pipe, socket or regular file) and device number rdev.
	Mknod(ctx context.Context, name string, mode iofs.FileMode, rdev uint64) (Node, error)
}

// Setattrer is a node whose mode, owner and times can be changed.
type Setattrer interface {
	// SetAttr applies the changes c asks for, in the order mode, owner,
	// times.
	SetAttr(ctx context.Context, c Change) error
}

// Change is what a SetAttr changes; nil fields stay as they are.
type Change struct {
	Mode     *iofs.FileMode // permission bits and ModeSetuid, ModeSetgid, ModeSticky
	UID, GID *uint32
	// Atime and Mtime set the times; a pointer to the zero time means
	// "now" (utimensat's UTIME_NOW).
	Atime, Mtime *time.Time
}

// Syncer is a handle whose data can be flushed to stable storage.
type Syncer interface {
	// Sync is fsync(2).
	Sync(ctx context.Context) error
}

// StatFSer is a node of a real file system that can describe it.
type StatFSer interface {
	// StatFS is statfs(2) of the file system the node is on.
	StatFS(ctx context.Context) (FSStat, error)
}

// FSStat is what statfs(2) says of a file system.
type FSStat struct {
	Type                         uint32
	BlockSize                    uint32
	Blocks, BlocksFree, BlocksAv uint64
	Files, FilesFree             uint64
	FSID                         uint64
	NameLength                   uint32
}

// BlockingWriter is a handle whose writes may block until a reader takes
// the data (a pipe: a guest process's stdin). The adapters give its
// writes a context that ends as a blocking read's does (9P Tflush or
// clunk, FUSE interrupt); other writes (ctl messages) run to their end.
type BlockingWriter interface {
	Handle
	// BlocksOnWrite marks the handle; it does nothing.
	BlocksOnWrite()
}

// Mover is a node whose identity is its path (a tree passing a real
// file system through): after a rename moved it (9P: the server's
// Renamed, for every fid in the moved subtree, parents first), it is
// told its new place, so it keeps naming the same file.
type Mover interface {
	Moved(newDir Node, newName string)
}
