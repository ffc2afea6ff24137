#!/bin/sh
# Builds what the boot benchmark needs (release build, cached kernel, initramfs) and
# runs benchmarks/boot.sh with KVM (nested under QEMU when /dev/kvm is missing).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
tools/setup.sh
kernel_dir=$(tools/build-kernel.sh)
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
tools/build-initramfs.sh build/release/initramfs.cpio build/release/mote-init
MOTE_BIN=$root/build/release/mote MOTE_MEASURE_BIN=$root/build/release/mote-measure \
	MOTE_KERNEL_DIR=$kernel_dir MOTE_INITRD=$root/build/release/initramfs.cpio \
	exec tools/kvm-run.sh benchmarks/boot.sh
