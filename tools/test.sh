#!/bin/sh
# The whole test suite, from a fresh Debian 12 machine: installs packages, builds the
# guest kernels (cached), builds mote with gcc (ASan+UBSan) and clang, runs the cmocka
# unit tests, then the integration tests on real KVM (nested under QEMU when this
# machine has no /dev/kvm). Exit status 0 only if everything passed.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
# The whole suite ends within MOTE_TEST_BUDGET seconds (CI allows 90 minutes): the
# integration tests get what the steps before them left.
began=$(date +%s)
budget=${MOTE_TEST_BUDGET:-5000}
# stage NAME: announces a step and the time the suite has run so far.
stage() {
	echo "== $* (at $(($(date +%s) - began)) s)"
}

tools/setup.sh
kernel_dir=$(tools/build-kernel.sh)
# A second kernel, with the keyboard drivers, for the SendCtrlAltDel test.
keyboard_kernel_dir=$(tools/build-kernel.sh --keyboard)

stage "format"
tools/check-format.sh

stage "build (gcc, ASan+UBSan)"
cmake -S . -B build/test -DCMAKE_C_COMPILER=gcc -DMOTE_SANITIZE=ON >/dev/null
cmake --build build/test -j"$(nproc)" >/dev/null

# The unit tests are built here too, not run: -O2 brings warnings (-Werror) that the
# unoptimised builds do not.
stage "build (gcc, Release: what tools/demo.sh and benchmarks/ use, and the unit tests)"
cmake -S . -B build/release -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=ON >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null

stage "build (clang, -Werror)"
cmake -S . -B build/clang -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build/clang -j"$(nproc)" >/dev/null

stage "fuzz (${MOTE_FUZZ_SECONDS:=20} s per target)"
cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DMOTE_FUZZ=ON -DMOTE_BUILD_TESTS=OFF >/dev/null
cmake --build build/fuzz -j"$(nproc)" >/dev/null
# Each target also starts from the inputs earlier runs on this machine found, kept
# outside the work tree as the guest kernel is, so that its seconds go further each run
# instead of rediscovering the same; a machine without them starts empty. New inputs
# land in the first directory; after a clean run, libFuzzer's merge adds to the kept
# ones only those that reach code they do not, which bounds them by what the target
# can reach (and so the time replaying them takes). A kept directory this user cannot
# use is left alone.
corpus_cache=${MOTE_CACHE:-/var/cache/mote}/fuzz-corpus
# Every target tests/fuzz/CMakeLists.txt defines (mote_fuzz_target), none forgotten.
while read -r target; do
	corpus=build/fuzz/corpus-$target
	kept=$corpus_cache/$target
	mkdir -p "$corpus"
	{ mkdir -p "$kept" && [ -r "$kept" ] && [ -w "$kept" ] && [ -x "$kept" ]; } 2>/dev/null || kept=
	# -timeout: one input running 60 s is a hang, reported as such (the default is 1200
	# s); crash inputs are kept under build/fuzz, not in the work tree's root.
	build/fuzz/tests/fuzz/$target -max_total_time="$MOTE_FUZZ_SECONDS" -max_len=65536 \
		-timeout=60 -artifact_prefix=build/fuzz/$target- \
		"$corpus" ${kept:+"$kept"} </dev/null >build/fuzz/$target.log 2>&1 ||
		{ tail -40 build/fuzz/$target.log; echo "fuzz: $target found a crash" >&2; exit 1; }
	tail -1 build/fuzz/$target.log
	if [ -n "$kept" ]; then
		build/fuzz/tests/fuzz/$target -merge=1 -timeout=60 -max_len=65536 "$kept" "$corpus" \
			</dev/null >build/fuzz/$target.merge.log 2>&1 ||
			echo "fuzz: $target: keeping this run's inputs failed (build/fuzz/$target.merge.log)"
	fi
done <build/fuzz/fuzz-targets.txt

stage "unit tests"
ctest --test-dir build/test --output-on-failure

stage "install"
rm -rf build/install-root
cmake --install build/clang --prefix "$root/build/install-root" >/dev/null
tools/check-install.sh "$root/build/install-root"

stage "integration tests (real KVM)"
tools/build-initramfs.sh build/test/initramfs.cpio build/test/mote-init
tools/build-rootfs.sh build/test/rootfs.ext4 build/test/mote-init build/test/mote-pattern \
	build/test/mote-pipe
# Up to eight boots of the outer guest: a CI run on 2026-12-05 lost five to emulator
# stalls, each resuming where the last stopped. The time budget bounds them all.
MOTE_BIN=$root/build/test/mote MOTE_KERNEL_DIR=$kernel_dir MOTE_KEYBOARD_KERNEL_DIR=$keyboard_kernel_dir \
	MOTE_INITRD=$root/build/test/initramfs.cpio MOTE_ROOTFS=$root/build/test/rootfs.ext4 \
	MOTE_PATTERN=$root/build/test/mote-pattern \
	MOTE_OUTER_MEM=${MOTE_OUTER_MEM:-8192} \
	MOTE_OUTER_TIMEOUT=${MOTE_OUTER_TIMEOUT:-$((budget - ($(date +%s) - began)))} \
	MOTE_OUTER_ATTEMPTS=${MOTE_OUTER_ATTEMPTS:-8} tools/kvm-run.sh tests/integration/run.sh
stage "all tests passed"
