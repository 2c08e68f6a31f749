#!/usr/bin/env bash
# Compiles the release binaries, RELEASE_JOBS platforms at a time (default:
# the number of cores), and writes each one's CycloneDX SBOM beside it:
#
#   hack/release/binaries.sh DIR TAG OS/ARCH...
#
# writes DIR/apportion_TAG_OS_ARCH (.exe on windows) and FILE.cdx.json for
# each FILE. Environment: LDFLAGS (the Makefile's), VERSION,
# SOURCE_DATE_EPOCH; GO (default go); RELEASE_JOBS.
#
# Each platform's output is kept apart and printed whole, in the order of the
# arguments, once all are done, so the log reads the same however the jobs
# interleave. After a failure no other platform is started, and the script
# exits 1 once the running ones end.
set -euo pipefail

if [[ $# -lt 3 ]]; then
	echo "usage: hack/release/binaries.sh DIR TAG OS/ARCH..." >&2
	exit 2
fi
dir="$1" tag="$2"
shift 2
platforms=("$@")
: "${LDFLAGS:?LDFLAGS (the Makefile sets it)}" "${VERSION:?}" "${SOURCE_DATE_EPOCH:?}"
go="${GO:-go}"
jobs="${RELEASE_JOBS:-$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}"
if [[ ! "$jobs" =~ ^[1-9][0-9]*$ ]]; then
	echo "RELEASE_JOBS=$jobs: want a number of jobs, at least 1" >&2
	exit 2
fi
if ((jobs > ${#platforms[@]})); then
	jobs=${#platforms[@]}
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The release tool once, not one `go run` per SBOM.
$go build -o "$tmp/release" ./hack/release

# build INDEX: one platform, its output in $tmp/INDEX.log, $tmp/INDEX.ok when
# it worked.
build() {
	local p="${platforms[$1]}" os arch out start
	os="${p%%/*}" arch="${p#*/}"
	if [[ -z "$os" || -z "$arch" || "$arch" == */* ]]; then
		echo "RELEASE_PLATFORMS: $p is not OS/ARCH"
		return 1
	fi
	out="$dir/apportion_${tag}_${os}_${arch}"
	[[ "$os" == windows ]] && out="$out.exe"
	start=$SECONDS
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" $go build -trimpath -ldflags "$LDFLAGS" -o "$out" ./cmd/apportion
	"$tmp/release" sbom --version "$VERSION" --source-date-epoch "$SOURCE_DATE_EPOCH" --out "$out.cdx.json" "$out"
	echo "build $out: $((SECONDS - start))s, $(($(stat -c %s "$out") / 1000000)) MB"
	touch "$tmp/$1.ok"
}

echo "building ${#platforms[@]} platform(s), $jobs at a time: ${platforms[*]}"
start=$SECONDS
failed=false
for i in "${!platforms[@]}"; do
	while (($(jobs -rp | wc -l) >= jobs)); do
		wait -n || failed=true
	done
	$failed && break
	build "$i" >"$tmp/$i.log" 2>&1 &
done
wait || true
for i in "${!platforms[@]}"; do
	[[ -e "$tmp/$i.log" ]] && cat "$tmp/$i.log"
	if [[ ! -e "$tmp/$i.ok" ]]; then
		failed=true
		[[ -e "$tmp/$i.log" ]] || echo "${platforms[$i]}: not built (an earlier platform failed)"
	fi
done
if $failed; then
	echo "building the release binaries failed (see above)" >&2
	exit 1
fi
echo "binaries built in $((SECONDS - start))s"
