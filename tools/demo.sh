#!/bin/sh
# The main job, from a fresh Debian 12 machine: installs packages, builds the guest
# kernel (cached) and mote, then boots a 2-vCPU microVM that runs a command and powers
# off. Without /dev/kvm it runs inside a nested-KVM QEMU guest (tools/kvm-run.sh).
# Pass a guest shell command to run something else: tools/demo.sh 'cat /proc/cpuinfo'.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
command=${1:-'uname -sr; echo vCPUs: $(nproc); grep MemTotal /proc/meminfo; ls /'}
# The kernel command line quotes with double quotes and has no escapes.
case $command in *'"'*) echo "demo: the guest command cannot contain double quotes" >&2; exit 2 ;; esac

tools/setup.sh
kernel_dir=$(tools/build-kernel.sh)
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
tools/build-initramfs.sh build/release/initramfs.cpio build/release/mote-init

exec tools/kvm-run.sh "$root/build/release/mote" run \
	--kernel "$kernel_dir/vmlinux" --initrd "$root/build/release/initramfs.cpio" \
	--cpus 2 --mem 256M \
	--cmdline "console=ttyS0 reboot=k panic=1 quiet mote.run=\"$command\""
