package fs

import (
	"context"
	iofs "io/fs"
)

// Optional interfaces for nodes whose content can be changed by name, as
// in a guest's fs/ (bound by ninep.Remote). The generated files of the tree have
// none of them: there the adapters keep refusing create, mkdir, unlink
// and truncation to a non-zero size (EPERM).

// Creator is a directory in which files can be created.
type Creator interface {
	// Create makes a new file called name (EEXIST if it exists) with
	// permissions perm and opens it with flags.
	Create(ctx context.Context, name string, flags OpenFlags, perm iofs.FileMode) (Node, Handle, error)
}

// Mkdirer is a directory in which directories can be created.
type Mkdirer interface {
	// Mkdir makes a new directory called name (EEXIST if it exists).
	Mkdir(ctx context.Context, name string, perm iofs.FileMode) (Node, error)
}

// Remover is a directory whose entries can be removed.
type Remover interface {
	// Remove removes the file called name, or the empty directory
	// when dir is set (ENOTEMPTY if it is not empty).
	Remove(ctx context.Context, name string, dir bool) error
}

// Truncater is a file whose size can be set.
type Truncater interface {
	// Truncate sets the file's size.
	Truncate(ctx context.Context, size int64) error
}
