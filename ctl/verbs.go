package ctl

import (
	"syscall"

	"sandfs/ctl/msg"
)

// This file is the reference for every ctl verb: one table per file that
// accepts messages, one entry per verb, documented in man-page style
// (usage, effect, required state, errors). Errors common to all verbs
// (E2BIG, EINVAL for malformed messages) are described at Parse.

// GlobalVerbs are the verbs of /ctl.
var GlobalVerbs = Table{
	{
		Name:  "new",
		Usage: "new [name] [template=name] [mem=size] [cpus=n] [world=name] [timeout=dur] [from=snap] [net=deny|allow|policy] [group=name]",
		Min:   0, Max: 1,
		Keys:  []string{"template", "mem", "cpus", "world", "timeout", "from", "net", "group"},
		Needs: []State{StateNew}, // the sandbox it creates, until it starts
		Doc: `Creates and starts a sandbox called name ([a-z0-9][a-z0-9-]{0,62};
without one, a short random id is chosen). Defaults: template=base
mem=256M cpus=1, no world, timeout=0 (none). mem is a size with an
optional K/M/G/T suffix (64M..64G, whole MiB); cpus is 1..32; timeout is
a duration (300, 90s, 5m, 1h) after which the sandbox is killed.
The write returns once the sandbox is running (reading the same open
/ctl then gives its id), or fails with the creation error, which is
also left in /err; a sandbox whose machine failed to start stays listed
as dead with the reason in its err file. It belongs to the writer's uid
and gid (Owner): its files under sandboxes/<id>/ are theirs.
With from=snap the sandbox is a restore of that snapshot (of any
sandbox of the writer's, which may be gone): its memory and a copy of
its disk, with fresh entropy, its own hostname and the wall clock;
status says boot=restore. The snapshot gives template, mem and cpus,
which may then not be given.
net= is its egress policy (docs/network.md): deny, allow, or a policy
whose lines are separated by ';', e.g.
net='allow 10.0.0.0/8; deny 10.1.0.0/16'; net/policy reads and replaces it.
Without net=, the template's policy (templates/<t>/policy: its own, else
deny).
group= makes it a member of that named group ([a-z0-9][a-z0-9-]{0,62}):
members reach each other at their member addresses (net/addr's member=)
where both policies allow it; nothing else reaches them.
Errors: EEXIST a sandbox called name exists; EINVAL from= with template,
mem or cpus, a bad net= policy or group name; ENOSPC 256 groups, or
254 members in the group, exist; ENODEV no VMM runtime is configured (nothing is created);
ENOENT unknown template, world or snapshot; EPERM the snapshot is
another uid's; ESTALE the snapshot's template image was rebuilt since; ECANCELED killed while creating; EINTR the writer was
interrupted (creation goes on); EIO the runtime failed.`,
		Run: handler{check: checkNew, plane: (*Plane).ctlNew},
	},
	{
		Name:  "kill",
		Usage: "kill <id>",
		Min:   1, Max: 1,
		Doc: `Same as writing kill to sandboxes/<id>/ctl, and allowed to the same
writers: the sandbox's owner and root.
Errors: ENOENT no such sandbox; EPERM not the owner; otherwise as the
sandbox's kill.`,
		Run: handler{check: checkID, plane: (*Plane).ctlKill},
	},
	{
		Name:  "rm",
		Usage: "rm <id>",
		Min:   1, Max: 1,
		Needs: []State{StateDead, StateNew}, NeedsWhy: "kill it first",
		Doc: `Removes the record of a dead sandbox: it disappears from /sandboxes,
its state file and runtime directory are deleted, and readers blocked on
its wait return. A sandbox still in state new (reserved by an open
/clone) is removed too.
Allowed to the sandbox's owner and root.
Required state: dead or new.
Errors: ENOENT no such sandbox; EPERM not the owner; EBUSY the sandbox is
not dead (kill it first).`,
		Run: handler{check: checkID, plane: (*Plane).ctlRm},
	},
	{
		Name:  "world",
		Usage: "world <name> lower=<host path> [mode=overlay|readonly|unsafe-rw]",
		Min:   1, Max: 1,
		Keys: []string{"lower", "mode"},
		Doc: `Creates world name (same grammar as sandbox ids), listed in
/worlds/<name>/: the host directory lower (an absolute path; its
symbolic links are resolved once, here, as the writer may: EACCES at a
directory they may not search) seen through a private upper
(docs/worlds.md). mode: overlay (the default: changes go to the upper),
readonly (every change is EROFS), unsafe-rw (changes go straight into
the lower, as the world's owner: uid and gid, the kernel refusing what
the owner could not write; no diff, nothing to apply). The world belongs to the writer's
uid, who must be able to read lower (search on each directory above it,
read and search on it); it survives a daemon restart until rm on its
ctl. Reading the same open gives its name.
Errors: EINVAL bad name, mode or lower= missing or relative; EEXIST a
world called name exists; ENOENT, ENOTDIR lower does not exist or is no
directory; EACCES the writer may not read lower; EIO the world's files
could not be made (nothing is listed).`,
		Run: handler{check: checkWorld, plane: (*Plane).ctlWorld},
	},
	{
		Name:  "retain",
		Usage: "retain [keep=n] [age=dur]",
		Min:   0, Max: 0,
		Keys: []string{"keep", "age"},
		Doc: `Sets the daemon's snapshot retention rules, as serve's flags
--snapshot-keep and --snapshot-max-age do (docs/snapshots.md
"Retention"): keep at most n listed snapshots of each sandbox, the newest,
and remove those older than dur; except the ones a sandbox stands on.
0 is no limit; a key not given keeps its value. keep is 0..1000000; age
is a duration (168h, 90m) or whole seconds, at most 100 years. A pass
applies the new rules at once. Without keys it changes nothing. Either
way reading the same open gives the rules now in force,
"keep=<n> age=<dur>" and a newline. The rules last until the daemon stops (its flags
set them at start). Setting is root's and the daemon user's only.
Errors: EINVAL a bad value or argument (nothing is changed); EPERM
keys given by another user.`,
		Run: handler{check: checkRetain, plane: (*Plane).ctlRetain},
	},
}

// WorldVerbs are the verbs of /worlds/<w>/ctl. They are allowed to the
// world's owner and root (EPERM otherwise); a failure's text goes to
// /err. docs/worlds.md describes the model.
var WorldVerbs = Table{
	{
		Name:  "apply",
		Usage: "apply [force]",
		Min:   0, Max: 1,
		Doc: `Writes the world's changes (its diff) into the lower, then removes them
from the upper. Root only (EPERM): it writes as the daemon, and the
owner was only checked to read the lower. Without force it first refuses if any path it would
change changed in the lower since the world first changed it, naming
those paths, and changes nothing. File by file, each synced and renamed
into place before its upper entry goes: a daemon killed meanwhile leaves
each lower file old or new, and a re-run completes the apply. The
world's other operations wait meanwhile.
Errors: EPERM not root; EINVAL an argument other than force, or an unsafe-rw world;
EBUSY conflicts (the text lists them); EIO a write failed (the changes
not yet applied stay in the upper).`,
		Run: handler{check: checkForce, world: (*Plane).worldApply},
	},
	{
		Name:  "discard",
		Usage: "discard",
		Min:   0, Max: 0,
		Doc: `Throws the world's changes away: the upper is replaced by an empty one
in one rename, so a daemon killed meanwhile leaves all or none of them.
Errors: EINVAL an unsafe-rw world; EIO the files could not be changed.`,
		Run: handler{world: (*Plane).worldDiscard},
	},
	{
		Name:  "rebase",
		Usage: "rebase",
		Min:   0, Max: 0,
		Doc: `Takes the lower's current state as the base where a change is no
longer one: changed files the lower now has alike, and deletions of
what the lower no longer has, are dropped from the upper. A read of the
same open gives how many were dropped. Conflicts stay (apply reports
them).
Errors: EINVAL an unsafe-rw world; EIO the files could not be changed.`,
		Run: handler{world: (*Plane).worldRebase},
	},
	{
		Name:  "rm",
		Usage: "rm",
		Min:   0, Max: 0,
		Doc: `Removes the world: it disappears from /worlds and its directory, the
upper with its changes included, is deleted. The lower is untouched.
Errors: ENOENT removed already; EBUSY a sandbox that is not dead has it
attached (kill it first); EIO the files could not be removed.`,
		Run: handler{world: (*Plane).worldRm},
	},
}

// checkWorld checks world <name> lower= mode=.
func checkWorld(c *Command) error {
	c.World = c.Args[0]
	if err := checkName(c.Verb, "world", c.World, c.World); err != nil {
		return err
	}
	if c.Keys["lower"] == "" {
		return Errorf(syscall.EINVAL, "%s: lower=<host path> is missing", c.Verb)
	}
	if m, ok := c.Keys["mode"]; ok && !validMode(m) {
		return Errorf(syscall.EINVAL, "%s: unknown mode %s", c.Verb, msg.Cite(m))
	}
	return nil
}

// checkForce checks apply's optional argument.
func checkForce(c *Command) error {
	if len(c.Args) == 1 && c.Args[0] != "force" {
		return Errorf(syscall.EINVAL, "%s: unknown argument %s", c.Verb, msg.Cite(c.Args[0]))
	}
	return nil
}

// SandboxVerbs are the verbs of /sandboxes/<id>/ctl and of an open /clone.
var SandboxVerbs = Table{
	{
		Name:  "template",
		Usage: "template <name>",
		Min:   1, Max: 1,
		Needs: []State{StateNew}, NeedsWhy: "configure before start",
		Doc: `Sets the template the sandbox will start from.
Required state: new (a sandbox reserved by opening /clone).
Errors: EBUSY not in state new.`,
		Run: handler{check: checkConfig, sandbox: (*Sandbox).configure},
	},
	{
		Name:  "mem",
		Usage: "mem <size>",
		Min:   1, Max: 1,
		Needs: []State{StateNew}, NeedsWhy: "configure before start",
		Doc: `Sets guest RAM: a size with an optional K/M/G/T suffix, 64M..64G,
whole MiB (256M, 1G).
Required state: new.
Errors: EINVAL bad size; EBUSY not in state new.`,
		Run: handler{check: checkConfig, sandbox: (*Sandbox).configure},
	},
	{
		Name:  "cpus",
		Usage: "cpus <n>",
		Min:   1, Max: 1,
		Needs: []State{StateNew}, NeedsWhy: "configure before start",
		Doc: `Sets the number of vCPUs, 1..32.
Required state: new.
Errors: EINVAL bad count; EBUSY not in state new.`,
		Run: handler{check: checkConfig, sandbox: (*Sandbox).configure},
	},
	{
		Name:  "world",
		Usage: "world <name>",
		Min:   1, Max: 1,
		Needs: []State{StateNew}, NeedsWhy: "configure before start",
		Doc: `Attaches world name at /workspace when the sandbox starts (the world
must exist and be the owner's; start fails with ENOENT or EPERM
otherwise; root may attach any).
Required state: new.
Errors: EBUSY not in state new.`,
		Run: handler{check: checkConfig, sandbox: (*Sandbox).configure},
	},
	{
		Name:  "start",
		Usage: "start",
		Min:   0, Max: 0,
		Needs: []State{StateNew},
		Doc: `Creates and starts the configured sandbox. The write returns once the
sandbox is running, or fails with the creation error (also in err); if
the machine failed to start the sandbox is dead with the reason in err.
Required state: new.
Errors: EBUSY not in state new; ENOENT unknown template or world (from
the runtime); ECANCELED killed while creating; EINTR the writer was
interrupted (creation goes on); EIO the runtime failed. (Without a VMM runtime, opening
/clone already fails with ENODEV.)`,
		Run: handler{sandbox: (*Sandbox).ctlStart},
	},
	{
		Name:  "pause",
		Usage: "pause",
		Min:   0, Max: 0,
		Needs: []State{StateRunning},
		Doc: `Stops the sandbox's vCPUs, keeping its state. Where the machine
and runtime can (the VMM runtime; not with a world), the sandbox is then
written to disk (a delta of the memory dirtied since its last snapshot
or restore, its disk layer made durable) and its machine ends: a paused
sandbox holds disk, not RAM.
Required state: running.
Errors: EBUSY not running; EIO (or the write's errno, e.g. ENOSPC) the
runtime failed (state unchanged).`,
		Run: handler{sandbox: (*Sandbox).pause},
	},
	{
		Name:  "resume",
		Usage: "resume",
		Min:   0, Max: 0,
		Needs: []State{StatePaused},
		Doc: `Restarts a paused sandbox; one paused to disk is restored from
its image (MAP_PRIVATE, lazily) with the wall clock and fresh entropy.
Required state: paused.
Errors: EBUSY not paused; ESTALE its template's image changed since
(still paused); EIO the runtime failed (state unchanged, except a
restore from disk that failed once started: the sandbox is dead, err
says why).`,
		Run: handler{sandbox: (*Sandbox).resume},
	},
	{
		Name:  "timeout",
		Usage: "timeout <dur>",
		Min:   1, Max: 1,
		Needs: []State{StateNew, StateCreating, StateRunning, StatePaused},
		Doc: `Sets the timeout: a duration (300, 90s, 5m, 1h) or 0 for none.
In state new it counts from start; when running or paused it counts
from now (it replaces the deadline). At the deadline the sandbox is
killed and its err says "timeout".
Required state: new, creating, running or paused.
Errors: EINVAL bad duration; EBUSY stopping or dead.`,
		Run: handler{check: checkConfig, sandbox: (*Sandbox).setTimeout},
	},
	{
		Name:  "kill",
		Usage: "kill",
		Min:   0, Max: 0,
		Doc: `Stops the sandbox's machine; the write returns once it is dead. The
record stays listed (state dead) until rm on /ctl. Killing a sandbox in
state new removes it; killing a dead sandbox does nothing.
Required state: any.
Errors: EIO the runtime failed to stop the machine.`,
		Run: handler{sandbox: (*Sandbox).ctlKill},
	},
	{
		Name:  "snapshot",
		Usage: "snapshot [name]",
		Min:   0, Max: 1,
		Needs: []State{StateRunning, StatePaused},
		Doc: `Takes a snapshot called name (same grammar as sandbox ids; without
one, a short random id), listed in snapshots/<name>/ here and in
/snapshots/<name>/: the guest's memory and its disk as they are now. A
running sandbox is paused for it and resumed; the write returns once
the snapshot is complete (a daemon killed meanwhile leaves it absent,
never half-written); a read of the same open then gives its name. The first snapshot of a machine is full, later ones
deltas over its last (or the one it was restored from) if that is still
listed. The snapshot belongs to the sandbox's owner and outlives the
sandbox.
Required state: running or paused.
Errors: EINVAL bad name; EEXIST a snapshot called name exists; EBUSY
not running or paused; ENOTSUP the machine cannot take snapshots; EIO
the runtime failed (nothing is listed; if the resume failed the
sandbox is left paused).`,
		Run: handler{check: checkSnapName, reply: (*Sandbox).snapshot},
	},
	{
		Name:  "rollback",
		Usage: "rollback <snap>",
		Min:   1, Max: 1,
		Needs: []State{StateRunning, StatePaused},
		Doc: `Replaces the sandbox's machine by a restore of snap, one of its own
snapshots: memory and disk are as they were then; processes and
connections from after it are gone (procs/ and fs/ reach the restored
guest). Same id and directory; the sandbox is running afterwards, and
its next snapshot is a delta over snap.
Required state: running or paused.
Errors: EINVAL bad name or a snapshot of another sandbox; ENOENT no
such snapshot; EBUSY not running or paused; ENOTSUP the runtime cannot
restore snapshots (nothing changed); EIO the old machine did not stop
(nothing changed); ESTALE the template image was rebuilt since the
snapshot, or EIO, the restore failed (the sandbox is then dead, its err
says why).`,
		Run: handler{check: checkSnapName, sandbox: (*Sandbox).rollback},
	},
	{
		Name:  "clone",
		Usage: "clone [n] [concurrency=c]",
		Min:   0, Max: 1,
		Keys:  []string{"concurrency"},
		Needs: []State{StateRunning, StatePaused},
		Doc: `Takes a snapshot of the sandbox (as snapshot, a generated name) and
creates n sandboxes from it (as new from=, generated ids; default 1,
at most 64), c at a time (default min(n, 4), at most 16). They belong
to this sandbox's owner and have its settings. All or nothing: the
write returns once every clone runs, and a read of the same open then
gives their ids, one a line; if any fails, every clone made so far is
killed and removed, and so is the snapshot.
Required state: running or paused.
Errors: EINVAL bad count or concurrency; EBUSY not running or paused;
ENOTSUP the runtime cannot restore snapshots; otherwise the error of
the snapshot or of the first clone that failed (its text says which).`,
		Run: handler{check: checkClone, reply: (*Sandbox).clone},
	},
}

// SnapshotVerbs are the verbs of /snapshots/<snap>/ctl and of
// /sandboxes/<id>/snapshots/<snap>/ctl. A failure's text goes to /err.
var SnapshotVerbs = Table{
	{
		Name:  "rm",
		Usage: "rm",
		Min:   0, Max: 0,
		Doc: `Removes the snapshot: it disappears from both listings and its files
are deleted; while deltas are over it, its files stay (unlisted) until
the last of them is removed. Allowed to its owner and root.
Errors: ENOENT removed already; EPERM not the owner; EBUSY a snapshot
or restore is using it; EIO the files could not be removed.`,
		Run: handler{snap: (*Plane).rmSnap},
	},
}

// checkSnapName checks the snapshot named by snapshot [name] and
// rollback <snap>.
func checkSnapName(c *Command) error {
	if len(c.Args) == 0 {
		return nil
	}
	c.Snap = c.Args[0]
	return checkName(c.Verb, "snapshot", c.Snap, c.Snap)
}

func checkID(c *Command) error {
	c.ID = c.Args[0]
	return checkName(c.Verb, "sandbox", c.ID, c.ID)
}

func checkNew(c *Command) error {
	if len(c.Args) == 1 {
		if err := checkID(c); err != nil {
			return err
		}
	}
	for _, k := range sortedKeys(c.Keys) {
		if err := setConfig(&c.Config, c.Verb, k, c.Keys[k], k+"="+c.Keys[k]); err != nil {
			return err
		}
	}
	if cf := c.Config; cf.From != "" && (cf.Template != "" || cf.MemBytes != 0 || cf.CPUs != 0) {
		return Errorf(syscall.EINVAL, "%s: from= gives template, mem and cpus %s", c.Verb, msg.Cite("from="+cf.From))
	}
	return nil
}

// checkConfig handles the one-setting verbs, named like the new keys.
func checkConfig(c *Command) error {
	return setConfig(&c.Config, c.Verb, c.Verb, c.Args[0], c.Args[0])
}

// setConfig validates value for setting key and stores it in cfg; input
// is quoted in errors.
func setConfig(cfg *Config, verb, key, value, input string) error {
	set := settings[key]
	if set == nil { // a key or verb without a setting: TestTables catches it
		return Errorf(syscall.EINVAL, "%s: unknown setting %s", verb, msg.Cite(input))
	}
	return set(cfg, verb, value, input)
}

// settings are the sandbox settings a message can give, by key: the keys
// of new and the one-setting verbs named like them. Each validates value
// (input is what the message said, quoted in errors) and stores it in cfg.
var settings = map[string]func(cfg *Config, verb, value, input string) error{
	"template": func(cfg *Config, verb, value, input string) error {
		cfg.Template = value
		return checkName(verb, "template", value, input)
	},
	"from": func(cfg *Config, verb, value, input string) error {
		cfg.From = value
		return checkName(verb, "snapshot", value, input)
	},
	"world": func(cfg *Config, verb, value, input string) error {
		cfg.World = value
		return checkName(verb, "world", value, input)
	},
	"mem": func(cfg *Config, verb, value, input string) (err error) {
		cfg.MemBytes, err = checkMem(verb, value, input)
		return err
	},
	"cpus": func(cfg *Config, verb, value, input string) (err error) {
		cfg.CPUs, err = checkCPUs(verb, value, input)
		return err
	},
	"timeout": func(cfg *Config, verb, value, input string) (err error) {
		cfg.Timeout, err = checkTimeout(verb, value, input)
		return err
	},
	"net": func(cfg *Config, verb, value, input string) (err error) {
		cfg.Net, err = checkNet(verb, value)
		return err
	},
	"group": func(cfg *Config, verb, value, input string) error {
		cfg.Group = value
		return checkName(verb, "group", value, input)
	},
}
