#!/bin/sh
# Builds what the block benchmark needs (release build, cached kernel, an ext4 root
# image with mote-init, mote-pattern and mote-blkbench) and runs benchmarks/blk.sh with
# KVM (nested under QEMU when /dev/kvm is missing; the images then live on the outer
# guest's scratch disk, $MOTE_SCRATCH). MOTE_BENCH_ONLY=qemu builds and runs only the
# QEMU side; MOTE_BUILD_DIR (build/release) picks the build directory. Other settings:
# see benchmarks/blk.sh.
set -eu
cd "$(dirname "$0")/.."
# shellcheck source=benchmarks/lib.sh
. benchmarks/lib.sh
targets="mote-init mote-pattern mote-blkbench"
[ "${MOTE_BENCH_ONLY:-}" = qemu ] || targets="$targets mote"
# shellcheck disable=SC2086 # one word per target
bench_build $targets
tools/build-rootfs.sh "$build/rootfs.img" "$build/mote-init" "$build/mote-pattern" \
	"$build/mote-blkbench"
MOTE_BIN=$build/mote MOTE_KERNEL_DIR=$kernel_dir MOTE_ROOTFS=$build/rootfs.img \
	exec tools/kvm-run.sh benchmarks/blk.sh
