#!/bin/sh
# Builds an ext4 root disk image for a guest booted with `root=/dev/vdX`: the same
# busybox tree as the initramfs (tools/guest-tree.sh), mote-init as /sbin/init (the
# kernel's default) and /init, the mount points /dev /proc /sys /tmp /mnt /root, and
# each EXTRA_BINARY in /usr/bin under its own name. mote-init must be static; an extra
# binary that is not (iperf3 from Debian, say) comes with the shared libraries and the
# program interpreter ldd names, at their host paths.
#
# mkfs.ext4 -d fills the file system from a directory, so no root privileges or loop
# mounts are needed. The image holds the content plus MOTE_ROOTFS_FREE_MIB (64) MiB
# free for the guest to write. The UUID, directory hash seed, file mtimes
# (SOURCE_DATE_EPOCH, default 0) and the root directory's owner are fixed, so images
# from the same inputs differ only in the times mke2fs stamps on the superblock and
# inodes. The image is written next to OUT and renamed, so OUT is never half-built.
#
#   usage: tools/build-rootfs.sh OUT.img MOTE_INIT [EXTRA_BINARY...]
# Environment: MOTE_BUSYBOX (/bin/busybox), MOTE_ROOTFS_FREE_MIB (64).
set -eu

[ $# -ge 2 ] || { echo "usage: $0 OUT.img MOTE_INIT [EXTRA_BINARY...]" >&2; exit 2; }
out=$1
init_binary=$2
shift 2
busybox=${MOTE_BUSYBOX:-/bin/busybox}
free_mib=${MOTE_ROOTFS_FREE_MIB:-64}
guest_tree_name=build-rootfs
# shellcheck source=tools/guest-tree.sh
. "$(dirname "$0")/guest-tree.sh"

# Fixed identities: "mote" in the first bytes, so the image is recognisable in blkid.
uuid=6d6f7465-726f-4f74-8000-000000000001
hash_seed=6d6f7465-726f-4f74-8000-000000000002

command -v mkfs.ext4 >/dev/null || { echo "build-rootfs: mkfs.ext4 missing; install e2fsprogs" >&2; exit 1; }
command -v readelf >/dev/null || { echo "build-rootfs: readelf missing; install binutils" >&2; exit 1; }
case $free_mib in '' | *[!0-9]*)
	echo "build-rootfs: MOTE_ROOTFS_FREE_MIB must be a number of MiB, not '$free_mib'" >&2
	exit 2 ;;
esac
guest_tree_check_busybox "$busybox"
guest_tree_check_static "$init_binary"
command -v ldd >/dev/null || { echo "build-rootfs: ldd missing; install libc-bin" >&2; exit 1; }
for binary in "$@"; do
	[ -f "$binary" ] && [ -x "$binary" ] ||
		{ echo "build-rootfs: $binary is not an executable file" >&2; exit 2; }
done

# The shared objects a dynamic binary loads: every absolute path in ldd's output
# ("libx.so => /lib/.../libx.so (0x...)" and the interpreter's own line).
shared_objects() { # BINARY
	ldd "$1" | sed -n 's|.*=> \(/[^ ]*\) .*|\1|p; s|^[[:space:]]*\(/[^ ]*\) .*|\1|p' | sort -u
}

root=$(mktemp -d)
out_tmp="$out.tmp.$$"
trap 'rm -rf "$root"; rm -f "$out_tmp"' EXIT

guest_tree_dirs "$root"
mkdir -p "$root/mnt" "$root/root" "$root/usr/bin"
chmod 0700 "$root/root"
guest_tree_busybox "$root" "$busybox"
cp "$init_binary" "$root/sbin/init"
chmod 0755 "$root/sbin/init"
# /init as well, so the same tree also boots where an initramfs-style /init is looked
# for; a hard link costs no blocks.
ln "$root/sbin/init" "$root/init"
for binary in "$@"; do
	name=$(basename "$binary")
	[ ! -e "$root/usr/bin/$name" ] ||
		{ echo "build-rootfs: two extra binaries are named $name" >&2; exit 2; }
	cp "$binary" "$root/usr/bin/$name"
	chmod 0755 "$root/usr/bin/$name"
	guest_tree_is_static_elf "$binary" && continue
	for lib in $(shared_objects "$binary"); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
done
guest_tree_fix_times "$root"

# Content in 4 KiB blocks (one per directory, short symlinks need none), plus the
# requested free space, plus a first guess for the journal, inode tables and bitmaps;
# mkfs is repeated with the shortfall added if the guess was too small.
content_kib=$(du -s -k "$root" | cut -f1)
size_mib=$((content_kib / 1024 + free_mib + 8 + (content_kib / 1024 + free_mib) / 16))
for attempt in 1 2 3; do
	rm -f "$out_tmp"
	truncate -s "${size_mib}M" "$out_tmp"
	# -T default: below 512 MiB mke2fs would pick the "small" profile (1 KiB blocks, an
	# inode per 4 KiB). -m 0: nothing reserved for root, the guest runs as root anyway.
	mkfs.ext4 -q -F -T default -b 4096 -m 0 -L mote-root -U "$uuid" \
		-E "hash_seed=$hash_seed,root_owner=0:0,nodiscard,lazy_itable_init=0,lazy_journal_init=0" \
		-d "$root" "$out_tmp" ||
		{ echo "build-rootfs: mkfs.ext4 failed on $out_tmp" >&2; exit 1; }
	free_kib=$(dumpe2fs -h "$out_tmp" 2>/dev/null |
		awk -F: '/^Free blocks:/ { f = $2 } /^Block size:/ { b = $2 } END { print int(f * b / 1024) }')
	[ "$free_kib" -ge $((free_mib * 1024)) ] && break
	[ "$attempt" -lt 3 ] ||
		{ echo "build-rootfs: only $free_kib KiB free in a $size_mib MiB image" >&2; exit 1; }
	size_mib=$((size_mib + (free_mib * 1024 - free_kib) / 1024 + 1))
done
mv "$out_tmp" "$out"
