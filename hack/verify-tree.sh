#!/usr/bin/env bash
# Fails when the tree tracks a file over 1 MiB, or an executable that is not a
# script (a build output committed by mistake). Every clone downloads every
# tracked file of the history: binaries belong in releases, not in git.
set -euo pipefail
limit=$((1024 * 1024))
bad=0
while IFS= read -r -d '' entry; do
	mode=${entry%% *}
	path=${entry#*$'\t'}
	# Only what is in the work tree (a file deleted but not yet committed
	# is not checked).
	[ -f "$path" ] || continue
	size=$(wc -c <"$path")
	if [ "$size" -gt "$limit" ]; then
		echo "tracked file over 1 MiB: $path ($size bytes)"
		bad=1
	fi
	if [ "$mode" = 100755 ] && [ "$(head -c 2 "$path")" != '#!' ]; then
		echo "tracked executable that is not a script: $path"
		bad=1
	fi
done < <(git ls-files -s -z)
if [ "$bad" -ne 0 ]; then
	echo "remove them from git (git rm --cached), and ignore build outputs in .gitignore"
	exit 1
fi
