package ninep

import "hash/fnv"

// A file's 9P identity (its QID path). Generated files have none of
// their own: the server makes one per tree path (Server.qidPath), with
// the top bit set. A file of a real file system passed through (a
// world's union and upper, posix.go) shows its inode number (sfs.Attr.Ino),
// the same for every name it has, so hard links are one file to a
// client. But one tree holds many such file systems, each numbering its
// files itself: two worlds over one lower show the same numbers for
// different files, and a client that took the numbers as they are would
// take those files for one (the Linux client's inode cache; diff, tar
// and cp, which compare device and inode numbers). So a number means a
// file only within its scope: the topmost node that shows a number,
// with everything below it. The QID path is the number mixed with the
// scope's path, except where the scope is the server's root (a world
// served to its guest): there the number is shown as it is.

// scope is the passed-through file system a file is in.
type scope struct {
	in   bool   // the file is in one
	salt uint64 // its path's hash; 0 for the server's root
}

// rootScope is the scope of a server's root, whose node shows ino.
func rootScope(ino uint64) scope { return scope{in: ino != 0} }

// below is the scope of a file at tree path p, whose node shows ino,
// under a directory of scope s: that one if there is one, else a new
// one rooted at p if the file shows a number.
func (s scope) below(p string, ino uint64) scope {
	if s.in || ino == 0 {
		return s
	}
	h := fnv.New64a()
	h.Write([]byte(p))
	return scope{in: true, salt: h.Sum64() | 1}
}

// qidOf is the QID path of the file at tree path p that shows ino, in
// scope sc. The top bit is the server's own numbers' (qidPath): passed
// through numbers never have it.
func (s *Server) qidOf(p string, ino uint64, sc scope) uint64 {
	switch {
	case ino == 0:
		return 1<<63 | s.qidPath(p)
	case sc.salt == 0:
		return ino &^ (1 << 63)
	}
	// A bijection of ino for each salt (an odd multiplier, then
	// splitmix64's finaliser) less the top bit: two files, of one scope
	// or two, meet only by a 63-bit accident.
	x := sc.salt ^ ino*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x &^ (1 << 63)
}
