#!/bin/sh
# Builds what the vsock benchmark needs (release build, cached kernel, a root image with
# mote-init, mote-pattern and mote-pipe) and runs benchmarks/vsock.sh with KVM
# (nested under QEMU when /dev/kvm is missing). Settings: see benchmarks/vsock.sh.
set -eu
cd "$(dirname "$0")/.."
# shellcheck source=benchmarks/lib.sh
. benchmarks/lib.sh
bench_build mote mote-init mote-pattern mote-pipe
tools/build-rootfs.sh "$build/rootfs-vsock.img" "$build/mote-init" "$build/mote-pattern" \
	"$build/mote-pipe"
MOTE_BIN=$build/mote MOTE_KERNEL_DIR=$kernel_dir MOTE_ROOTFS=$build/rootfs-vsock.img \
	MOTE_PATTERN=$build/mote-pattern exec tools/kvm-run.sh benchmarks/vsock.sh
