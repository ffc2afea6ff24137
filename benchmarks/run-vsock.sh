#!/bin/sh
# Builds what the vsock benchmark needs (release build, cached kernel, a root image with
# mote-init, mote-pattern and mote-vsock-pipe) and runs benchmarks/vsock.sh with KVM
# (nested under QEMU when /dev/kvm is missing). Settings: see benchmarks/vsock.sh.
set -eu
cd "$(dirname "$0")/.."
tools/setup.sh
kernel_dir=$(tools/build-kernel.sh)
build=${MOTE_BUILD_DIR:-build/release}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=OFF >/dev/null
build=$(cd "$build" && pwd)
cmake --build "$build" -j"$(nproc)" --target mote mote-init mote-pattern mote-vsock-pipe >/dev/null
tools/build-rootfs.sh "$build/rootfs-vsock.img" "$build/mote-init" "$build/mote-pattern" \
	"$build/mote-vsock-pipe"
MOTE_BIN=$build/mote MOTE_KERNEL_DIR=$kernel_dir MOTE_ROOTFS=$build/rootfs-vsock.img \
	MOTE_PATTERN=$build/mote-pattern exec tools/kvm-run.sh benchmarks/vsock.sh
