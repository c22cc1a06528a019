#!/usr/bin/env bash
# tools/kernel/build.sh: build a sandfs kernel.
#
#   tools/kernel/build.sh        # build/vmlinuz, build/kernel.config: the one kernel (guest and lab)
#   tools/kernel/build.sh 6.12   # build/vmlinuz-6.12, build/kernel-6.12.config
#
# The one kernel is Debian's linux-source-6.1: the guests' and the lab's.
# The second, Debian's linux-source-6.12, is a newer host kernel for a lab
# run of its own in `make test` (`sandfs lab -kernel build/vmlinuz-6.12`):
# what the VMM does only on a host newer than 6.1 (PAGEMAP_SCAN, Linux
# 6.7: docs/snapshots.md "Dirty tracking") is tested there. Both take the
# same fragment, tools/kernel/sandfs.config; for 6.12 the lines of options
# it no longer has are dropped (SLOB, BASE_FULL, RANDOM_TRUST_CPU: 6.2
# trusts the CPU by default) and SLUB_TINY is turned off.
#
# Recipe: `make ARCH=x86_64 allnoconfig` with KCONFIG_ALLCONFIG = tinyconfig
# fragments + the fragment, every fragment line verified, then `make
# bzImage`. The result is cached at ${SANDFS_CACHE:-/var/cache/sandfs}/kernel/<key>/
# where <key> hashes the fragment, this script and the kernel source package
# version; a second run with the same key only copies the cached files (well
# under a second).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SANDFS_CACHE:-/var/cache/sandfs}/kernel
version=${1:-6.1}
case $version in
6.1) suffix= ;;
6.12) suffix=-6.12 ;;
*)
	echo "usage: $0 [6.12]" >&2
	exit 2
	;;
esac
srcpkg=linux-source-$version
out_img=$repo/build/vmlinuz$suffix
out_cfg=$repo/build/kernel$suffix.config
frag=$(mktemp)
trap 'rm -f "$frag"' EXIT
if [ "$version" = 6.12 ]; then
	grep -v -x -e '# CONFIG_SLOB is not set' -e 'CONFIG_BASE_FULL=y' -e 'CONFIG_RANDOM_TRUST_CPU=y' "$here/sandfs.config" > "$frag"
	echo '# CONFIG_SLUB_TINY is not set' >> "$frag"
else
	cp "$here/sandfs.config" "$frag"
fi
jobs=${SANDFS_JOBS:-$(nproc)}

log() { printf '[kernel] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---- packages (fresh machine) ----
need=()
for p in $srcpkg build-essential bc bison flex libelf-dev libssl-dev cpio lz4 zstd xz-utils; do
	dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || need+=("$p")
done
if ((${#need[@]})); then
	log "installing ${need[*]}"
	[ "$(id -u)" = 0 ] || die "need root to apt-get install ${need[*]}"
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

srcver=$(dpkg-query -W -f '${Version}' $srcpkg)
# Bump recipe when a change below alters the kernel produced (not for cosmetics).
recipe="allnoconfig+tiny-base+tiny+x86-tiny+fragment bzImage v1"
key=$( { echo "$srcpkg $srcver"; gcc -dumpfullversion; echo "$recipe"; cat "$frag"; } | sha256sum | cut -c1-16)
dir=$cache/$key
mkdir -p "$cache" "$repo/build"

install_out() {
	cp -f "$dir/bzImage" "$out_img.tmp" && mv -f "$out_img.tmp" "$out_img"
	cp -f "$dir/config" "$out_cfg"
	# Its symbols (no KASLR: the addresses it runs at), for the RIPs of
	# a lab's or a nested guest's dump read on the host (docs/lab.md).
	if [ -f "$dir/obj/System.map" ]; then
		cp -f "$dir/obj/System.map" "$repo/build/System.map$suffix.tmp" && mv -f "$repo/build/System.map$suffix.tmp" "$repo/build/System.map$suffix"
	fi
	echo "$key" > "$repo/build/kernel$suffix.key"
	log "ready: $out_img ($(stat -c %s "$out_img") bytes, $srcpkg $srcver, cache $dir)"
}

if [ -f "$dir/DONE" ]; then
	install_out
	exit 0
fi

# One builder at a time per cache (others wait, then find DONE).
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "another kernel build holds $cache/.lock; waiting"
	flock 9
fi
if [ -f "$dir/DONE" ]; then
	install_out
	exit 0
fi

# ---- source tree (extracted once per source version, never written to) ----
src=$cache/src/$srcpkg-$srcver
if [ ! -f "$src/.extracted" ]; then
	log "extracting /usr/src/$srcpkg.tar.xz (about 10-30 s)"
	rm -rf "$src" && mkdir -p "$src"
	tar -xf "/usr/src/$srcpkg.tar.xz" -C "$src" --strip-components=1
	touch "$src/.extracted"
fi

start=$(date +%s)
obj=$dir/obj
mkdir -p "$obj"
kmake() { make -C "$src" O="$obj" ARCH=x86_64 "$@"; }

# ---- config ----
cat "$src/kernel/configs/tiny-base.config" "$src/kernel/configs/tiny.config" \
	"$src/arch/x86/configs/tiny.config" "$frag" > "$obj/allconfig.frag"
log "configuring (tinyconfig + $(grep -c '^CONFIG_\|^# CONFIG_' "$frag") fragment lines)"
kmake KCONFIG_ALLCONFIG="$obj/allconfig.frag" allnoconfig > "$dir/config.log" 2>&1 ||
	{ tail -n 30 "$dir/config.log" >&2; die "allnoconfig failed (log $dir/config.log)"; }

missing=0
while IFS= read -r line; do
	case $line in
	CONFIG_*=*)
		grep -qx -- "$line" "$obj/.config" || { log "fragment line did not land: $line"; missing=1; } ;;
	"# CONFIG_"*" is not set")
		opt=${line#\# }; opt=${opt%% *}
		! grep -q "^$opt=" "$obj/.config" || { log "fragment line did not land: $line"; missing=1; } ;;
	esac
done < "$frag"
((missing == 0)) || die "config fragment not fully applied ($srcpkg); fix tools/kernel/sandfs.config"

# ---- build, with progress (one line per 200 build steps) ----
log "building bzImage with -j$jobs (about 5 min on 2 cores; log $dir/build.log)"
set +e
kmake -j"$jobs" bzImage 2>&1 | tee "$dir/build.log" | {
	n=0
	while IFS= read -r line; do
		n=$((n + 1))
		case $line in
		*" error"* | *"Error "[0-9]* | *warning:*) printf '[kernel] %s\n' "$line" ;;
		esac
		if ((n % 200 == 0)); then
			e=$(($(date +%s) - start))
			printf '[kernel] %5d steps, %dm%02ds: %s\n' "$n" $((e / 60)) $((e % 60)) "$line"
		fi
	done
} >&2
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || { tail -n 40 "$dir/build.log" >&2; die "make bzImage failed (exit $rc, log $dir/build.log)"; }

cp -f "$obj/arch/x86/boot/bzImage" "$dir/bzImage"
cp -f "$obj/.config" "$dir/config"
secs=$(($(date +%s) - start))
echo "$secs" > "$dir/build-seconds"
touch "$dir/DONE"
log "built in ${secs}s"
install_out
