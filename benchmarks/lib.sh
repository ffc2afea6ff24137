# shellcheck shell=sh
# Shared by the benchmark scripts: the build they start with, QEMU microvm's common
# arguments, and the statistics. POSIX sh; sourcing it has no side effects.

# bench_build TARGET...: installs the packages, builds (or takes from the cache) the
# guest kernel and builds TARGET... in a release tree. Sets kernel_dir and build (an
# absolute path; MOTE_BUILD_DIR, default build/release). Run from the repository root.
bench_build() {
	tools/setup.sh
	kernel_dir=$(tools/build-kernel.sh)
	build=${MOTE_BUILD_DIR:-build/release}
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=OFF >/dev/null
	build=$(cd "$build" && pwd)
	cmake --build "$build" -j"$(nproc)" --target "$@" >/dev/null
}

# The QEMU microvm command line at its fastest settings for this kernel (design.md),
# up to and including the kernel: KERNEL MEM CPUS. Devices and -append follow.
qemu_microvm() { # KERNEL MEM CPUS
	echo "qemu-system-x86_64 -M microvm,acpi=off,pit=off,pic=off,rtc=off -accel kvm -cpu host" \
		"-m $2 -smp $3 -nodefaults -no-user-config -nographic -serial stdio -no-reboot" \
		"-kernel $1"
}

# The words in reverse order: the second run of an interleaved pair goes the other way.
bench_reverse() (
	out=""
	for w; do out="$w${out:+ $out}"; done
	echo "$out"
)

# The median of the numbers on stdin, printed with FORMAT (printf), or "-" for none.
bench_median() { # FORMAT
	sort -n | awk -v fmt="$1" '{ v[NR] = $1 } END {
		if (!NR) { print "-"; exit }
		printf fmt "\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
