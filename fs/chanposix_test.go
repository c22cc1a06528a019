package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl/cred"
)

// posixFile is a file owned by uid 4200 that records the changes it is
// asked for.
type posixFile struct{ got []Change }

func (f *posixFile) Stat(context.Context) (Attr, error) {
	return Attr{Mode: 0o600, Owner: &cred.Owner{UID: 4200, GID: 4200}}, nil
}

func (f *posixFile) SetAttr(_ context.Context, c Change) error {
	f.got = append(f.got, c)
	return nil
}

// TestChanSetAttr checks Chan.SetAttr's rule (setattr_prepare): mode and
// explicit times by the owner, owner changes by the privileged only,
// times to now by anyone who may write.
func TestChanSetAttr(t *testing.T) {
	var (
		root     = cred.Cred{UID: 0}
		owner    = cred.Cred{UID: 4200, GID: 4200}
		stranger = cred.Cred{UID: 4201, GID: 4201}
		mode     = iofs.FileMode(0o644)
		uid      = uint32(7)
		now      = time.Time{}
		then     = time.Unix(1e9, 0)
	)
	cases := []struct {
		name string
		who  cred.Cred
		c    Change
		want error
	}{
		{"owner chmod", owner, Change{Mode: &mode}, nil},
		{"stranger chmod", stranger, Change{Mode: &mode}, syscall.EPERM},
		{"owner chown", owner, Change{UID: &uid}, syscall.EPERM},
		{"root chown", root, Change{UID: &uid}, nil},
		{"owner sets mtime", owner, Change{Mtime: &then}, nil},
		{"stranger sets mtime", stranger, Change{Mtime: &then}, syscall.EPERM},
		{"stranger touches (no write)", stranger, Change{Mtime: &now}, syscall.EACCES},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &posixFile{}
			ctx := cred.With(context.Background(), tc.who)
			ch, err := NewChan(ctx, f, cred.Owner{})
			if err != nil {
				t.Fatal(err)
			}
			err = ch.SetAttr(ctx, tc.c)
			if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
				t.Fatalf("SetAttr = %v; want %v", err, tc.want)
			}
			if applied := len(f.got) == 1; applied != (tc.want == nil) {
				t.Errorf("node saw %d changes; want it to see one only if allowed", len(f.got))
			}
		})
	}
}

// TestChanPosixRefusals: nodes without the optional interfaces refuse.
func TestChanPosixRefusals(t *testing.T) {
	ctx := context.Background()
	d, err := NewChan(ctx, EmptyDir{Mode: 0o755}, cred.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Rename(ctx, "a", d, "b"); !errors.Is(err, syscall.EPERM) {
		t.Errorf("Rename = %v; want EPERM", err)
	}
	if _, err := d.Symlink(ctx, "t", "l"); !errors.Is(err, syscall.EPERM) {
		t.Errorf("Symlink = %v; want EPERM", err)
	}
	if _, err := d.Readlink(ctx); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Readlink = %v; want EINVAL", err)
	}
	if _, err := d.StatFS(ctx); !errors.Is(err, syscall.ENOSYS) {
		t.Errorf("StatFS = %v; want ENOSYS", err)
	}
	if err := d.SetAttr(ctx, Change{}); !errors.Is(err, syscall.EPERM) {
		t.Errorf("SetAttr = %v; want EPERM", err)
	}
}
