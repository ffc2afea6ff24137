#!/bin/sh
# Fails when a C file in the tree differs from what .clang-format makes of it.
set -eu
cd "$(dirname "$0")/.."
bad=0
for f in $(git ls-files '*.c' '*.h'); do
	if ! clang-format --style=file "$f" | cmp -s - "$f"; then
		echo "not formatted: $f (run clang-format -i $f)" >&2
		bad=1
	fi
done
exit $bad
