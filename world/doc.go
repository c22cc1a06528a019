// Package world is the union of a read-only lower directory and a
// world's private upper directory, presented as fs nodes (package fs):
// reads fall through to the lower, the first change of a file copies it
// up, deletions leave whiteouts. It also computes the world's change set
// (Diff) and applies it to the lower (Apply, with conflict detection),
// throws it away (Discard) or drops what the lower now has too (Rebase).
// docs/worlds.md describes the model; this comment the invariants.
//
// On disk, a world is a directory (Open's dir) holding:
//
//	upper/    the changes: a plain directory, with OCI-layer whiteouts
//	          (".wh.<name>": <name> is deleted; ".wh..wh..opq" in a
//	          directory: nothing of the lower's directory shows through)
//	work/     copy-up and discard scratch, on the upper's file system
//	origins   what the lower had at each changed path when the world
//	          first changed it (the base apply checks against), and the
//	          lower inode of each copied-up file (stable inode numbers)
//
// Names starting with ".wh." are reserved: they cannot be created in a
// world, and a lower's entries with such names are not shown.
//
// Confinement: every path is reached with openat2(root, path,
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) from the
// lower's or the upper's root descriptor, with O_NOFOLLOW; changes use the
// *at calls on a parent descriptor so reached. A symbolic link is a file
// of the world (its text is stored, read and copied), never followed; a
// name is one component (never "", ".", ".." or with "/"). Nothing
// outside the two roots is reachable.
//
// Lifetimes: nodes hold a path and what was seen at lookup; every change
// resolves the path again. Handles own a descriptor of the layer they
// were opened on: a file opened for reading before a copy-up keeps
// reading the lower's copy (as overlayfs does).
//
// Lock order: World.layers (read by every operation; written by Apply,
// Discard and Rebase, which rewrite the upper) before World.mu (changes
// of the upper's names; never held while file data is copied) before
// meta.mu (a leaf); World.mu before the UpperView's layers (Discard
// points the view at the new upper). A copy-up streams the data with only layers held for
// reading, so other operations on the world go on meanwhile.
package world
