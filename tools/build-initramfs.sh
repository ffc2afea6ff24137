#!/bin/sh
# Packs the guest's initramfs: /init (mote-init), a static busybox with a symlink per
# applet in /bin, the mount points guest-init uses, and console/null nodes when run as
# root (guest-init mounts devtmpfs and reopens /dev/console anyway).
# Deterministic: sorted entries, fixed mtimes and owners, so the same inputs give the
# same bytes.
#   usage: tools/build-initramfs.sh OUT.cpio.gz MOTE_INIT_BINARY
set -eu

[ $# -eq 2 ] || { echo "usage: $0 OUT.cpio.gz MOTE_INIT_BINARY" >&2; exit 2; }
out=$1
init_binary=$2
busybox=${MOTE_BUSYBOX:-/bin/busybox}

[ -x "$init_binary" ] || { echo "build-initramfs: $init_binary is not an executable" >&2; exit 1; }
# A dynamically linked busybox would find no libc in the guest.
if ! "$busybox" --list >/dev/null 2>&1 || ldd "$busybox" >/dev/null 2>&1; then
	echo "build-initramfs: $busybox is not a static busybox; install busybox-static" >&2
	exit 1
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root/bin" "$root/sbin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp"
chmod 0755 "$root"
chmod 1777 "$root/tmp"
cp "$init_binary" "$root/init"
cp "$busybox" "$root/bin/busybox"
chmod 0755 "$root/init" "$root/bin/busybox"
for applet in $("$busybox" --list); do
	[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
if [ "$(id -u)" -eq 0 ]; then
	mknod -m 600 "$root/dev/console" c 5 1
	mknod -m 666 "$root/dev/null" c 1 3
fi

# newc with --reproducible (cpio >= 2.13) zeroes inode and device numbers; touch fixes
# mtimes; gzip -n leaves the name and time out of the header.
find "$root" -exec touch -h -d @0 {} +
out_tmp="$out.tmp.$$"
(cd "$root" && find . | LC_ALL=C sort |
	cpio --quiet -o -H newc -R 0:0 --reproducible) | gzip -n -6 >"$out_tmp"
mv "$out_tmp" "$out"
