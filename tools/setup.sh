#!/bin/sh
# Installs every Debian package that building mote, its guest and its tests need.
# Idempotent: apt-get skips what is already installed.
set -eu

packages="
build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
libcmocka-dev libcjson-dev liburing-dev libfdt-dev zlib1g-dev libxxhash-dev libseccomp-dev
libhttp-parser-dev libcurl4-openssl-dev
linux-source-6.1 bc flex bison libelf-dev libssl-dev lz4 xz-utils kmod cpio
busybox-static qemu-system-x86 e2fsprogs socat git iperf3 iproute2 python3 dmsetup
"

missing=""
for p in $packages; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update
# env: sudo would drop DEBIAN_FRONTEND (env_reset), and iperf3 would ask its question.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
