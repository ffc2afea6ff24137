#!/bin/sh
# Packs the guest's initramfs: /init (mote-init), a static busybox with a symlink per
# applet in /bin, the mount points guest-init uses, and console/null nodes when run as
# root (guest-init mounts devtmpfs and reopens /dev/console anyway). The tree is the
# one tools/build-rootfs.sh puts on an ext4 root (tools/guest-tree.sh).
# Deterministic: sorted entries, fixed mtimes and owners, so the same inputs give the
# same bytes. OUT's suffix picks the compression: .gz gzip, .lz4 LZ4 (the legacy frame
# the kernel reads), anything else none. mote's own builds use none: the guest copies
# an uncompressed archive faster than it inflates a gzip one (a nested boot spent 75 ms
# more on gzip, and LZ4 saved nothing), and the file is read from the page cache.
#   usage: tools/build-initramfs.sh OUT.cpio[.gz|.lz4] MOTE_INIT_BINARY
set -eu

[ $# -eq 2 ] || { echo "usage: $0 OUT.cpio[.gz|.lz4] MOTE_INIT_BINARY" >&2; exit 2; }
out=$1
init_binary=$2
busybox=${MOTE_BUSYBOX:-/bin/busybox}
guest_tree_name=build-initramfs
# shellcheck source=tools/guest-tree.sh
. "$(dirname "$0")/guest-tree.sh"

# Not necessarily static: tools/kvm-run.sh packs a shell script as /init.
[ -x "$init_binary" ] || { echo "build-initramfs: $init_binary is not an executable" >&2; exit 1; }
guest_tree_check_busybox "$busybox"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

guest_tree_dirs "$root"
guest_tree_busybox "$root" "$busybox"
cp "$init_binary" "$root/init"
chmod 0755 "$root/init"
if [ "$(id -u)" -eq 0 ]; then
	mknod -m 600 "$root/dev/console" c 5 1
	mknod -m 666 "$root/dev/null" c 1 3
fi

# gzip -n leaves the name and time out of the header; lz4 -l writes the legacy frame,
# the only one the kernel's unpacker knows (lib/decompress_unlz4.c).
compress() {
	case $out in
	*.gz) gzip -n -6 ;;
	*.lz4) lz4 -l -9 -q ;;
	*) cat ;;
	esac
}

# newc with --reproducible (cpio >= 2.13) zeroes inode and device numbers; touch fixes
# mtimes (SOURCE_DATE_EPOCH, default 0).
guest_tree_fix_times "$root"
out_tmp="$out.tmp.$$"
trap 'rm -rf "$root" "$out_tmp"' EXIT
trap 'exit 130' INT TERM
# sh has no pipefail: cpio's failure is caught through a file, so that a cut-short
# archive is never renamed into place (kvm-run.sh caches it).
(cd "$root" && find . | LC_ALL=C sort |
	{ cpio --quiet -o -H newc -R 0:0 --reproducible || touch "$root.cpio-failed"; }) |
	compress >"$out_tmp"
if [ -e "$root.cpio-failed" ]; then
	rm -f "$root.cpio-failed"
	echo "build-initramfs: cpio failed" >&2
	exit 1
fi
mv "$out_tmp" "$out"
