#!/usr/bin/env bash
# Prints the path of the helm or cosign that make release and make
# release-push run, on one line of stdout (what it chose goes to stderr):
#
#   hack/release/tools.sh helm      helm v3, at least v3.13.0 (`helm push --plain-http`)
#   hack/release/tools.sh cosign    cosign v2, at least v2.2.1 (`cosign attest --type slsaprovenance1`)
#
# The one on PATH when its version fits; else the version test/tools pins
# (test/tools/helm/go.mod, test/tools/cosign/go.mod), built from the Go module
# proxy by `test/tools/build.sh --only NAME` into its cache folder
# ($APPORTION_TOOLS_DIR, default $HOME/.cache/apportion/tools) the first time
# (helm: 585 s on 2 busy cores with an empty Go build cache; CONTRIBUTING.md,
# "How long make release takes"), well under a second after that. Nothing
# else of test/tools is built.
#
# Not taken from PATH: helm v4 and cosign v3, whose defaults differ (cosign v3
# signs in the new bundle format and stores signatures as OCI referrers,
# which docs/verifying-releases.md's commands do not read).
# The Makefile's HELM=path and COSIGN=path skip this script.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The version of "vMAJOR.MINOR.PATCH..." in $1 as three numbers, or nothing.
semver() {
	if [[ "$1" =~ v([0-9]+)\.([0-9]+)\.([0-9]+) ]]; then
		printf '%s %s %s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
	fi
}

# fits VERSION MAJOR MIN_MINOR MIN_PATCH: VERSION is MAJOR.x.y, at least
# MAJOR.MIN_MINOR.MIN_PATCH.
fits() {
	local v
	v="$(semver "$1")"
	[[ -n "$v" ]] || return 1
	read -r ma mi pa <<<"$v"
	((ma == $2)) || return 1
	((mi > $3 || (mi == $3 && pa >= $4)))
}

case "${1:-}" in
helm)
	name=helm min=(3 13 0)
	version_of() { "$1" version --short 2>/dev/null; }
	;;
cosign)
	name=cosign min=(2 2 1)
	version_of() { "$1" version 2>/dev/null | awk '$1 == "GitVersion:" { print $2; exit }'; }
	;;
*)
	echo "usage: hack/release/tools.sh helm|cosign" >&2
	exit 2
	;;
esac
want="v${min[0]}.${min[1]}.${min[2]}"

if path="$(command -v "$name" 2>/dev/null)"; then
	have="$(version_of "$path" || true)"
	if fits "$have" "${min[@]}"; then
		echo "$name: $path ($have)" >&2
		printf '%s\n' "$path"
		exit 0
	fi
	echo "$name: $path is ${have:-of an unknown version}, not $want or a later v${min[0]}: building the pinned one" >&2
fi

bin="$("$here/../../test/tools/build.sh" --quiet --only "$name")"
echo "$name: $bin/$name ($(version_of "$bin/$name" || true), test/tools)" >&2
printf '%s\n' "$bin/$name"
