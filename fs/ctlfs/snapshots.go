package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"
	"syscall"

	sfs "sandfs/fs"

	"sandfs/ctl"
	"sandfs/ctl/msg"
)

// snapshotsDir serves /snapshots/ (every snapshot) and
// /sandboxes/<id>/snapshots/ (the snapshots taken of that sandbox, sb
// set): one directory per snapshot, oldest first. Anyone who may list it
// sees the names; a snapshot's own directory is its owner's alone.
type snapshotsDir struct {
	plane *ctl.Plane
	sb    *ctl.Sandbox // nil: every snapshot
	mode  iofs.FileMode
}

var _ sfs.Dir = (*snapshotsDir)(nil)

// Stat implements fs.Node.Stat.
func (d *snapshotsDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | d.mode.Perm()}, nil
}

// Lookup implements fs.Dir.Lookup.
func (d *snapshotsDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	si, err := d.plane.LookupSnapshot(name)
	if err != nil {
		return nil, err
	}
	if d.sb != nil && si.Sandbox != d.sb.ID() {
		return nil, ctl.Errorf(syscall.ENOENT, "lookup: no snapshot %s of sandbox %s", msg.Cite(name), msg.Cite(d.sb.ID()))
	}
	o := si.Owner
	return snapshotTable.Dir(snapNode{d.plane, si}, 0o500, &o), nil
}

// List implements fs.Dir.List.
func (d *snapshotsDir) List(context.Context) ([]sfs.Dirent, error) {
	sis := d.plane.Snapshots()
	if d.sb != nil {
		sis = d.sb.Snapshots()
	}
	out := make([]sfs.Dirent, len(sis))
	for i, si := range sis {
		out[i] = sfs.Dirent{Name: si.ID, Mode: iofs.ModeDir}
	}
	return out, nil
}

// snapNode is the value a snapshot's directory serves.
type snapNode struct {
	p  *ctl.Plane
	si ctl.SnapshotInfo
}

// snapshotTable is a snapshot's directory, /snapshots/<snap>/ and
// /sandboxes/<id>/snapshots/<snap>/, owned by the snapshot's owner (its
// sandbox's) and closed to others (0500).
var snapshotTable = sfs.Table[snapNode]{
	{Name: "info", Mode: 0o400, New: snapInfoFile},
	{Name: "ctl", Mode: 0o600, New: snapCtlFile},
}

// snapInfoFile serves <snap>/info, one line in fixed field order
// (ctl.SnapshotInfo.Line; new fields only at the end), e.g.
//
//	s1 sandbox=box1 parent=- created=1764423000 mem=268435456 data=47185920 disk=1052672 kind=full
func snapInfoFile(n snapNode, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(n.si.Line())
		b.WriteByte('\n')
		return nil
	}}
}

// snapCtlFile serves <snap>/ctl: a write is one verb (ctl.SnapshotVerbs:
// rm), whose failure's text goes to /err; a read gives the id:
//
//	s1
func snapCtlFile(n snapNode, mode iofs.FileMode) sfs.Node {
	return &sfs.CtlFile{
		TextFile: sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
			b.WriteString(n.si.ID)
			b.WriteByte('\n')
			return nil
		}},
		Msg: func(ctx context.Context, m []byte) error { return n.p.SnapshotCtl(ctx, n.si.ID, m) },
	}
}
