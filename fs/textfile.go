package fs

import (
	"bytes"
	"context"
	iofs "io/fs"
)

// TextFile is a generated file without per-open state, the usual row of
// a Table: Stat gives FileAttr(Mode) and a read gives the text Gen
// writes (Source). Files with per-open state implement Opener instead.
type TextFile struct {
	Mode iofs.FileMode
	Gen  func(ctx context.Context, b *bytes.Buffer) error
}

var _ Source = (*TextFile)(nil)

// Stat implements Node.Stat.
func (f *TextFile) Stat(context.Context) (Attr, error) { return FileAttr(f.Mode), nil }

// Text implements Source.
func (f *TextFile) Text(ctx context.Context, b *bytes.Buffer) error { return f.Gen(ctx, b) }

// CtlFile is a TextFile that also takes messages: each write is one call
// of Msg (Sink).
type CtlFile struct {
	TextFile
	Msg func(ctx context.Context, m []byte) error
}

var _ Sink = (*CtlFile)(nil)

// Message implements Sink.
func (f *CtlFile) Message(ctx context.Context, m []byte) error { return f.Msg(ctx, m) }
