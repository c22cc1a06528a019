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
	for _, name := range SplitPath(p) {
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

// SplitPath returns the names of slash-separated path p, without the
// empty ones (leading, trailing or doubled slashes).
func SplitPath(p string) []string {
	var names []string
	for _, n := range strings.Split(p, "/") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names
}
