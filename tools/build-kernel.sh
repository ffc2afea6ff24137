#!/bin/sh
# Builds the stripped guest kernel from Debian's linux-source-6.1: tinyconfig plus
# tools/guest-kernel.config. The result (vmlinux and an LZ4 bzImage) is cached outside
# the work tree, keyed by the fragment, this script, the source package version and
# the compiler, so a second run costs nothing. Builds of one key take turns (a lock),
# so a second run waits for the first rather than replace the kernel it is using.
# Prints the cache directory on stdout.
# usage: build-kernel.sh [--keyboard]
#   --keyboard  also tools/guest-kernel-keyboard.config: the i8042 and AT keyboard
#               drivers that SendCtrlAltDel needs (a kernel of its own, cached apart)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# The fragments, in merge order, are the positional parameters from here on: a path
# with spaces (a checkout under "My Projects") stays one word.
case "${1:-}" in
"") set -- "$here/guest-kernel.config" ;;
--keyboard) set -- "$here/guest-kernel.config" "$here/guest-kernel-keyboard.config" ;;
*) echo "build-kernel: unknown option '$1' (usage: build-kernel.sh [--keyboard])" >&2; exit 2 ;;
esac
tarball=/usr/src/linux-source-6.1.tar.xz
cache_root=${MOTE_CACHE:-/var/cache/mote}

[ -r "$tarball" ] || { echo "build-kernel: $tarball missing; run tools/setup.sh" >&2; exit 1; }
case "$cache_root" in
*[[:space:]:]*)
	# Kbuild refuses such a tree ("main directory cannot contain spaces nor colons").
	echo "build-kernel: the kernel is built under MOTE_CACHE, '$cache_root', which must not hold spaces or colons" >&2
	exit 2 ;;
esac

source_version=$(dpkg-query -W -f='${Version}' linux-source-6.1)
key=$( { cat "$@" "$0"; echo "$source_version"; gcc --version | head -1; } |
	sha256sum | cut -c1-16)
out="$cache_root/kernel-$key"

built() { [ -f "$out/vmlinux" ] && [ -f "$out/bzImage" ]; }
if built; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache_root"
exec 9>"$out.lock"
flock 9
if built; then # another run built it meanwhile
	echo "$out"
	exit 0
fi
work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# sh runs the EXIT trap on exit only: a Ctrl-C must exit, or the >1 GB source tree stays.
trap 'exit 130' INT TERM HUP

echo "build-kernel: building guest kernel $key (about 10 minutes on 2 cores)" >&2
tar -xJf "$tarball" -C "$work"
src="$work/linux-source-6.1"
# merge_config.sh splits its arguments at spaces, so it gets the fragments as copies
# with plain names, relative to the tree it runs in.
copies='' n=0
for fragment; do
	n=$((n + 1))
	cp "$fragment" "$src/mote-fragment-$n.config"
	copies="$copies mote-fragment-$n.config"
done
{
	make -C "$src" tinyconfig
	# shellcheck disable=SC2086 # the copies' names hold no spaces
	(cd "$src" && scripts/kconfig/merge_config.sh -m -O . .config $copies)
	make -C "$src" olddefconfig
} >"$work/config.log" 2>&1 || { cat "$work/config.log" >&2; exit 1; }

# merge_config only warns when Kconfig drops an option; a dropped option here is a bug.
# Each option as the last fragment to name it has it (as merge_config merges them).
missing=0
grep -hE '^(CONFIG_[A-Z0-9_]+=|# CONFIG_[A-Z0-9_]+ is not set)' "$@" |
	awk '{ name = $1 == "#" ? $2 : substr($1, 1, index($1, "=") - 1)
	       if (!(name in line)) order[n++] = name
	       line[name] = $0 }
	     END { for (i = 0; i < n; i++) print line[order[i]] }' | while read -r line; do
	grep -qxF "$line" "$src/.config" || { echo "build-kernel: not in final .config: $line" >&2; echo x; }
done | grep -q x && missing=1
[ "$missing" -eq 0 ] || exit 1

make -C "$src" -j"$(nproc)" vmlinux bzImage >"$work/build.log" 2>&1 ||
	{ tail -50 "$work/build.log" >&2; exit 1; }

staging="$work/out"
mkdir -p "$staging"
cp "$src/vmlinux" "$src/arch/x86/boot/bzImage" "$src/.config" "$staging/"
rm -rf "$out"
mv "$staging" "$out"
echo "$out"
