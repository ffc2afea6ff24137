#!/bin/sh
# Builds what the network benchmark needs (release build, cached kernel, an ext4 root
# image with mote-init and Debian's iperf3 with its libraries) and runs
# benchmarks/net.sh with KVM (nested under QEMU when /dev/kvm is missing). Settings:
# see benchmarks/net.sh; MOTE_BUILD_DIR (build/release) picks the build directory.
set -eu
cd "$(dirname "$0")/.."
# shellcheck source=benchmarks/lib.sh
. benchmarks/lib.sh
bench_build mote mote-init
tools/build-rootfs.sh "$build/rootfs-net.img" "$build/mote-init" "$(command -v iperf3)"
MOTE_BIN=$build/mote MOTE_KERNEL_DIR=$kernel_dir MOTE_ROOTFS=$build/rootfs-net.img \
	exec tools/kvm-run.sh benchmarks/net.sh
