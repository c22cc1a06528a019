// Package cgroup finds how a host's cgroups are laid out and confines a
// process in a cgroup with memory, CPU and PID limits, in whichever layout
// the host has.
//
// Decide picks a Mode from the cgroup mounts of /proc/self/mountinfo
// (ParseMountinfo) and, for each cgroup2 mount, the controllers its root
// offers (its cgroup.controllers file). Decide is pure, so the choice is
// tested over recorded layouts (testdata/*.txt); Detect reads the live
// files and calls it.
//
//	cgroup2  a writable cgroup2 mount whose cgroup.controllers lists memory,
//	         pids and cpu: /sys/fs/cgroup on a pure v2 host, or wherever it
//	         is mounted (/sys/fs/cgroup/unified) if the controllers are there
//	cgroup1  otherwise, writable v1 hierarchies that hold memory, pids and
//	         cpu: a pure v1 host, or the hybrid layout (v1 controllers under
//	         /sys/fs/cgroup/<controller>, a cgroup2 at /sys/fs/cgroup/unified
//	         with none of them)
//	none     neither; Layout.Why says what is missing, and callers run
//	         without limits and say so
//
// A controller is bound to one hierarchy at a time (cgroups(7), "Cgroups
// version 1 and version 2 coexisting"), so a host could put memory in v2
// and cpu in v1; such a mix is treated as none.
//
// Limits (Limits) map onto the files of each version:
//
//	                v2            v1
//	memory          memory.max    memory.limit_in_bytes
//	cpu             cpu.max       cpu.cfs_period_us, cpu.cfs_quota_us
//	pids            pids.max      pids.max
//
// Entering the group: in v2 a child is created inside it by clone3 with
// CLONE_INTO_CGROUP (Group.FD, for syscall.SysProcAttr.CgroupFD), so it
// never runs outside. v1 has no such flag: the parent writes the child's
// pid into each hierarchy's cgroup.procs (Group.Add), and the child must
// wait for that before it allocates what the limits are meant to cover
// (vmmproc.Launch holds its child at a start gate until then). Memory charged
// before the move stays with the old group in v1.
//
// Lifetime: Create makes one leaf directory per hierarchy used; missing
// parents are created and left in place (other groups share them).
// Remove deletes the leaves once the group's processes have been reaped:
// rmdir of a cgroup with live tasks fails with EBUSY. A Group's methods
// are not safe for concurrent use.
package cgroup
