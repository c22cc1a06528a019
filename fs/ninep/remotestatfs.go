package ninep

import (
	"context"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

var _ sfs.StatFSer = (*remoteNode)(nil)

// StatFS implements sfs.StatFSer: the server's statfs (Tstatfs) of the
// file system the node is on, so that statfs of a bound directory (a
// sandbox's fs/) describes the guest's file system, not the tree's.
// The numbers are the server's, unchecked: a caller that computes with
// them bounds them itself.
func (n *remoteNode) StatFS(ctx context.Context) (sfs.FSStat, error) {
	s, err := n.r.shared(ctx)
	if err != nil {
		return sfs.FSStat{}, err
	}
	st, err := call(ctx, n.r, s, "statfs "+n.path(), true, nil, func() (p9.FSStat, error) {
		_, f, err := s.root.Walk(n.names())
		if err != nil {
			return p9.FSStat{}, err
		}
		defer f.Close()
		return f.StatFS()
	})
	if err != nil {
		return sfs.FSStat{}, err
	}
	return sfs.FSStat{Type: st.Type, BlockSize: st.BlockSize, Blocks: st.Blocks, BlocksFree: st.BlocksFree,
		BlocksAv: st.BlocksAvailable, Files: st.Files, FilesFree: st.FilesFree, FSID: st.FSID, NameLength: st.NameLength}, nil
}
