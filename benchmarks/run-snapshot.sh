#!/bin/sh
# Builds what the snapshot benchmark needs (release build, cached kernel, initramfs) and
# runs benchmarks/snapshot.sh with KVM (nested under QEMU when /dev/kvm is missing). The
# outer guest gets 16 GiB: 32 QEMU copies each hold their own guest memory.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=benchmarks/lib.sh
. benchmarks/lib.sh
bench_build mote mote-init
tools/build-initramfs.sh "$build/initramfs.cpio" "$build/mote-init"
# The outer CPU keeps ERMS here (kvm-run.sh drops it by default): without it the outer
# kernel panicked on all three boots of one run at the 32 copies in one process ("stack
# guard page was hit", then "corrupted stack end detected inside scheduler"), while
# with it that run got past them (2026-12-05).
MOTE_BIN=$build/mote MOTE_KERNEL_DIR=$kernel_dir MOTE_INITRD=$build/initramfs.cpio \
	MOTE_OUTER_MEM=${MOTE_OUTER_MEM:-16384} MOTE_OUTER_CPU=${MOTE_OUTER_CPU:-max} \
	exec tools/kvm-run.sh benchmarks/snapshot.sh
