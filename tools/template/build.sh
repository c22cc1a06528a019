#!/usr/bin/env bash
# tools/template/build.sh [NAME]: build a sandfs template root filesystem.
#
#   tools/template/build.sh base     # -> build/templates/base.ext4
#
# Two cache levels under ${SANDFS_CACHE:-/var/cache/sandfs}/template/:
#   tree-<recipe hash>/        debootstrap --variant=minbase bookworm + the
#                              recipe's packages (slow: minutes, network)
#   <name>-<tree+init hash>.ext4  mkfs.ext4 -d of the tree with bin/sandfs-init
#                              installed as /sbin/init (fast: seconds)
# The second level reruns whenever bin/sandfs-init changes. If the repo has no
# bin/sandfs-init yet, the image is built without it (and says so).
# The Debian mirror is the one apt uses on this host (/etc/apt/sources.list*),
# or $SANDFS_DEBIAN_MIRROR.
set -euo pipefail

name=${1:-base}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SANDFS_CACHE:-/var/cache/sandfs}/template
out=$repo/build/templates/$name.ext4
init_bin=$repo/bin/sandfs-init

log() { printf '[template] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---- recipe (everything here is hashed into the tree key) ----
suite=bookworm
variant=minbase
case $name in
base) include=bash,coreutils,ca-certificates,python3,iproute2,procps,git,make,gcc,libc6-dev ;;
*) die "unknown template \"$name\" (known: base)" ;;
esac
# Bump when the tree customisation below changes.
tree_recipe="v1 $suite $variant $include"
# Bump when the image step (mkfs options, init placement) changes.
image_recipe="v1 ext4 init=/sbin/init"

# ---- packages (fresh machine) ----
need=()
for p in debootstrap e2fsprogs debian-archive-keyring; do
	dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || need+=("$p")
done
if ((${#need[@]})); then
	log "installing ${need[*]}"
	[ "$(id -u)" = 0 ] || die "need root to apt-get install ${need[*]}"
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
[ "$(id -u)" = 0 ] || die "debootstrap and mkfs.ext4 -d need root"

# The host's Debian mirror: first deb822 URIs or one-line "deb" entry whose
# suite is $suite (not -security/-updates).
mirror() {
	if [ -n "${SANDFS_DEBIAN_MIRROR:-}" ]; then echo "$SANDFS_DEBIAN_MIRROR"; return; fi
	local f m
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		m=$(awk -v s="$suite" '
			/^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
			END { if (uri != "" && ok) print uri }' "$f" | head -n1)
		[ -n "$m" ] && { echo "$m"; return; }
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		m=$(awk -v s="$suite" '$1 == "deb" { u = $2; if (u ~ /^\[/) { u = $3; su = $4 } else su = $3; if (su == s) { print u; exit } }' "$f")
		[ -n "$m" ] && { echo "$m"; return; }
	done
	echo http://deb.debian.org/debian
}

mkdir -p "$cache" "$repo/build/templates"
exec 9>"$cache/.lock"
flock -n 9 || { log "another template build holds $cache/.lock; waiting"; flock 9; }

# ---- level 1: the debootstrap tree ----
tree_key=$(echo "$tree_recipe" | sha256sum | cut -c1-16)
tree=$cache/tree-$tree_key
if [ ! -f "$tree.done" ]; then
	m=$(mirror)
	log "debootstrap --variant=$variant $suite from $m with $include (a few minutes)"
	t0=$(date +%s)
	rm -rf "$tree.tmp" "$tree"
	debootstrap --variant="$variant" --include="$include" "$suite" "$tree.tmp" "$m" 2>&1 |
		while IFS= read -r l; do
			case $l in
			I:\ Retrieving* | I:\ Validating*) ;; # one line per package twice over: too chatty
			*) printf '[template] %s\n' "$l" ;;
			esac
		done >&2
	[ "${PIPESTATUS[0]}" = 0 ] || die "debootstrap failed (see $tree.tmp/debootstrap/debootstrap.log)"
	# Customise: small, no apt caches, a hostname, no init yet.
	rm -rf "$tree.tmp"/var/cache/apt/archives/*.deb "$tree.tmp"/var/lib/apt/lists/* \
		"$tree.tmp"/var/log/*.log "$tree.tmp"/var/cache/debconf/*-old
	echo sandbox > "$tree.tmp/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 sandbox\n::1 localhost ip6-localhost ip6-loopback\n' > "$tree.tmp/etc/hosts"
	: > "$tree.tmp/etc/fstab"
	mv "$tree.tmp" "$tree"
	echo "$(($(date +%s) - t0))" > "$tree.done"
	log "tree ready in $(cat "$tree.done")s: $tree ($(du -sh "$tree" | cut -f1))"
fi

# ---- level 2: the ext4 image (tree + init) ----
if [ -f "$init_bin" ]; then
	init_hash=$(sha256sum < "$init_bin" | cut -c1-16)
else
	init_hash=none
	log "warning: $init_bin does not exist yet (make build); image has NO /sbin/init"
fi
img_key=$(echo "$tree_key $init_hash $image_recipe" | sha256sum | cut -c1-16)
img=$cache/$name-$img_key.ext4
if [ ! -f "$img" ]; then
	t0=$(date +%s)
	stage=$cache/stage-$name
	rm -rf "$stage"
	cp -al "$tree" "$stage" # hard links: instant, and the cached tree stays untouched
	if [ "$init_hash" != none ]; then
		rm -f "$stage/sbin/init"
		install -m 0755 "$init_bin" "$stage/sbin/init" # /sbin -> usr/sbin on bookworm
	fi
	kib=$(du -sk "$stage" | cut -f1)
	size_mib=${SANDFS_TEMPLATE_MIB:-$(((kib * 2 / 1024 + 255) / 256 * 256))}
	((size_mib >= 1024)) || size_mib=1024
	log "mkfs.ext4 -d ($((kib / 1024)) MiB of files in a ${size_mib} MiB image)"
	rm -f "$img.tmp"
	mkfs.ext4 -q -F -L "sandfs-$name" -m 0 -E lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0 \
		-d "$stage" "$img.tmp" "${size_mib}M" >/dev/null
	rm -rf "$stage"
	mv "$img.tmp" "$img"
	log "image built in $(($(date +%s) - t0))s"
	# Keep the 3 newest images of this template (each init change makes one).
	ls -t "$cache/$name"-*.ext4 2>/dev/null | tail -n +4 | xargs -r rm -f
fi
cp --sparse=always -f "$img" "$out.tmp" && mv -f "$out.tmp" "$out"
echo "$img_key init=$init_hash" > "$repo/build/templates/$name.key"
log "ready: $out (init: $([ "$init_hash" = none ] && echo none || echo /sbin/init from bin/sandfs-init))"
