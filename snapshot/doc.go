// Package snapshot is the on-disk format of sandfs memory snapshots: a
// versioned, checksummed directory per snapshot, written atomically, that
// holds either every page of guest RAM that has data (a full snapshot) or
// only the pages dirtied since its parent (a delta), plus the machine's
// opaque state (vCPUs, devices: vmm.EncodeState's bytes). A chain (a full
// snapshot and the deltas over it) is restored without copying: the full
// image is mapped MAP_PRIVATE and each delta's runs of pages are mapped
// MAP_FIXED|MAP_PRIVATE over it (Map), so a restore costs O(runs), not
// O(memory). docs/snapshots.md has the mechanism and the numbers.
//
// # Layout
//
// A snapshot is a directory named by its id, inside a store directory that
// also holds its parent (a parent is referred to by id, resolved as a
// sibling, and pinned by its checksum):
//
//	<store>/<id>/meta   header, page runs, state; SHA-256 trailer
//	<store>/<id>/mem    page data
//
// meta (little-endian):
//
//	 0  magic     "SANDSNAP"
//	 8  version   u32 (Version: 2; Open reads 1 too)
//	12  pagesize  u32 (PageSize)
//	16  membytes  u64   guest RAM size
//	24  databytes u64   size of mem
//	32  datasum   u32   CRC of the runs' data, in run order: CRC-32
//	                    (IEEE) from version 2, CRC-32C in version 1
//	36  nruns     u32
//	40  statelen  u32
//	44  idlen     u16
//	46  parentlen u16   0 for a full snapshot
//	48  parentsum [32]  the parent's Sum (its meta trailer)
//	80  id, parent id, runs (nruns x {page u64, count u64, offset u64}), state
//	 …  sum       [32]  SHA-256 of every byte before it: the snapshot's Sum
//
// mem: a full snapshot's mem is a sparse image of RAM (page p at offset
// p*PageSize, holes read as zero), so it maps as one piece; a delta's mem
// holds its runs packed one after another, each page-aligned.
//
// # Invariants
//
//   - A snapshot is complete and listed, or absent: Write builds it in a
//     temporary ".tmp-*" sibling, fsyncs both files and the directory,
//     renames it into place (never over an existing one) and fsyncs the
//     store. A kill at any point leaves at most a ".tmp-*" directory,
//     which List skips and Clean removes.
//   - Snapshots are immutable once written; a delta is valid only over the
//     exact parent it was taken against (same id and Sum).
//   - Open checks the header, its checksum and mem's size (truncation),
//     not the data: that would cost O(data) at every restore. Verify
//     checks the data CRC; Compact does too.
//   - Decoding is bounded: meta is at most MaxMeta bytes, the state at
//     most MaxState, a chain at most MaxDepth snapshots.
package snapshot
