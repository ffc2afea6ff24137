#!/bin/sh
# Fails when a C file in the tree differs from what .clang-format makes of it.
set -eu
cd "$(dirname "$0")/.."
bad=0
# Listed first, so that git's failure (no .git, "dubious ownership") fails the check
# rather than leave nothing to check.
files=$(git ls-files '*.c' '*.h')
[ -n "$files" ] || { echo "check-format: git lists no C files" >&2; exit 1; }
for f in $files; do
	if ! clang-format --style=file "$f" | cmp -s - "$f"; then
		echo "not formatted: $f (run clang-format -i $f)" >&2
		bad=1
	fi
done
exit $bad
