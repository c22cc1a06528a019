package fs

import (
	"context"
	"fmt"
	iofs "io/fs"
	"strings"
)

// Walk returns the node at slash-separated path p under root, for tools
// and tests that use the tree in-process.
func Walk(ctx context.Context, root Node, p string) (Node, error) {
	n := root
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if name == "" {
			continue
		}
		d, ok := n.(Dir)
		if !ok {
			return nil, fmt.Errorf("walk %s: %w", p, iofs.ErrInvalid)
		}
		c, err := d.Lookup(ctx, name)
		if err != nil {
			return nil, err
		}
		n = c
	}
	return n, nil
}
