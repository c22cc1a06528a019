package ctl

import (
	"context"
	"fmt"
)

func wrap(err error) error { return fmt.Errorf("outer: %w", err) }

func contextCanceled() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return wrap(ctx.Err())
}
