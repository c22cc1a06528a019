package ctlfs_test

import (
	"context"
	"sync"
	"time"

	"sandfs/fs/ctlfs"

	"sandfs/ctl"
)

// fakeRuntime starts fake machines at once; it also re-attaches every
// recorded sandbox, like a VMM whose process outlived the daemon.
type fakeRuntime struct{}

func (fakeRuntime) Start(ctx context.Context, s ctl.Spec) (ctl.Machine, error) {
	return newFakeMachine(), nil
}

// Restore implements ctl.SnapshotRestorer.
func (fakeRuntime) Restore(ctx context.Context, s ctl.Spec, from ctl.SnapshotRef) (ctl.Machine, error) {
	return newFakeMachine(), nil
}

func (fakeRuntime) Reattach(ctx context.Context, s ctl.Spec) (ctl.Machine, error) {
	return newFakeMachine(), nil
}

// Templates implements ctl.TemplateLister: base, with one shape built.
func (fakeRuntime) Templates() ([]ctl.TemplateInfo, error) {
	return []ctl.TemplateInfo{{Name: "base", ImageBytes: 268435456, Shapes: []ctl.TemplateShape{{
		Key: "base-256m1c-0123456789abcdef", MemBytes: 256 << 20, CPUs: 1, DataBytes: 47185920, DiskBytes: 581632,
		Built: time.Unix(1764423000, 0), Current: true}}}}, nil
}

type fakeMachine struct {
	done chan struct{}
	once sync.Once
}

func newFakeMachine() *fakeMachine { return &fakeMachine{done: make(chan struct{})} }

func (m *fakeMachine) Pause(context.Context) error  { return nil }
func (m *fakeMachine) Resume(context.Context) error { return nil }
func (m *fakeMachine) Stop(context.Context) error {
	m.once.Do(func() { close(m.done) })
	return nil
}
func (m *fakeMachine) Done() <-chan struct{} { return m.done }

// Snapshot implements ctl.Snapshotter: a full snapshot with no files.
func (m *fakeMachine) Snapshot(ctx context.Context, dir, parent string) (ctl.SnapshotStats, error) {
	return ctl.SnapshotStats{DataBytes: 4096}, nil
}
func (m *fakeMachine) Err() error { return nil }

func sfsNew(p *ctl.Plane) *ctlfs.Tree { return ctlfs.New(p, nil) }
