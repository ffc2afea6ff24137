#!/bin/sh
# Checks an installed tree (cmake --install --prefix DIR): header, both libraries, the
# pkg-config file, the command, and that a program builds against libmote through
# pkg-config and runs.
set -eu
prefix=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for f in include/mote.h lib/libmote.a bin/mote; do
	[ -e "$prefix/$f" ] || { echo "check-install: $f not installed" >&2; exit 1; }
done
ls "$prefix"/lib/libmote.so.* >/dev/null
cat >"$work/use.c" <<'C'
#include <mote.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
	struct mote_config config;
	struct mote_vm *vm;
	mote_config_init(&config);
	/* No kernel: creation must fail cleanly, never exit. */
	if (mote_vm_create(&config, &vm) != -22 || vm)
		return 1;
	printf("%s\n", mote_version());
	return strcmp(mote_version(), MOTE_VERSION) != 0;
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -o "$work/use" "$work/use.c" $(pkg-config --cflags --libs libmote)
LD_LIBRARY_PATH="$prefix/lib" "$work/use" >/dev/null
cc -o "$work/use-static" "$work/use.c" $(pkg-config --cflags --static libmote) \
	"$prefix/lib/libmote.a" $(pkg-config --static --libs-only-l libcjson liburing) \
	$(pkg-config --libs-only-l zlib) -lhttp_parser -lpthread
"$work/use-static" >/dev/null
"$prefix/bin/mote" --version >/dev/null
# libcurl is loaded when a command calls a mote's API (vmm/shared_lib.h): a VM's process
# must not pay for loading it and its ~20 libraries at start.
if readelf -d "$prefix/bin/mote" "$prefix"/lib/libmote.so.* | grep -E 'NEEDED.*libcurl'; then
	echo "check-install: mote or libmote.so loads the libraries above at start" >&2
	exit 1
fi
echo "check-install: ok"
