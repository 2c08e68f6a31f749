#!/usr/bin/env bash
# Builds the programs of the local test cluster once, into a versioned cache
# folder, from the Go module proxy only (no release downloads, no docker):
#
#   kube-apiserver kube-controller-manager kube-scheduler kubectl  (k8s.io/kubernetes)
#   etcd                                                           (go.etcd.io/etcd/server/v3)
#   karpenter-kwok  (Karpenter's kwok cloud provider, sigs.k8s.io/karpenter/kwok)
#   kwok            (the kwok node/pod simulator, sigs.k8s.io/kwok/cmd/kwok)
#   helm            (helm.sh/helm/v3/cmd/helm, from ./helm/go.mod)
#   cosign          (github.com/sigstore/cosign/v2/cmd/cosign, from ./cosign/go.mod:
#                    make release-push signs with it, the chart suite verifies)
#   prometheus promtool  (github.com/prometheus/prometheus, from ./prometheus/go.mod)
#
# and copies beside them the data the launcher needs: Karpenter's CRDs and the
# kwok stages (one combined stages.yaml for `kwok --config`).
#
# Versions come from ./go.mod, ./helm/go.mod, ./cosign/go.mod and
# ./prometheus/go.mod; this script has none of its own. cosign and Prometheus
# are not part of <key> below (a new version is rebuilt by its stamp, without
# rebuilding the rest).
#
# Layout ($APPORTION_TOOLS_DIR defaults to $HOME/.cache/apportion/tools):
#   $APPORTION_TOOLS_DIR/<key>/bin/<binary>          the programs
#   $APPORTION_TOOLS_DIR/<key>/crds/*.yaml           NodePool, NodeClaim, NodeOverlay,
#                                                    CapacityBuffer, KWOKNodeClass CRDs
#   $APPORTION_TOOLS_DIR/<key>/stages/*.yaml         the kwok stages, one per file
#   $APPORTION_TOOLS_DIR/<key>/stages.yaml           the same, combined: kwok --config=<this>
#   $APPORTION_TOOLS_DIR/<key>/versions.env          KEY=value lines: the versions built
#   $APPORTION_TOOLS_DIR/<key>/.stamps/<binary>      what each binary was built from
# where <key> is made from the tool versions, e.g.
#   k8s1.36.4-etcd3.6.8-karpenter1.15.0-kwok0.8.0-helm3.22.0
#
# Usage:
#   test/tools/build.sh              build what is missing or stale; progress and
#                                    timings go to stderr, and stdout gets exactly one
#                                    line, the bin dir:  bin="$(test/tools/build.sh)"
#   test/tools/build.sh --print-dir  print the bin dir without building anything
#   test/tools/build.sh --quiet      as the default, without the "up to date" line
#   test/tools/build.sh --set NAME   build the tools set NAME of the compatibility
#                                    matrix instead (also: APPORTION_TOOLS_SET=NAME);
#                                    --list-sets prints the names
#   test/tools/build.sh --only helm,cosign
#                                    build only these binaries of the default set (and
#                                    not the CRDs and stages): what make release needs
#                                    when helm or cosign is not on PATH (see
#                                    hack/release/tools.sh); a later run without --only
#                                    builds the rest into the same folder
#
# Tools sets: the default set is ./go.mod. A set NAME is ./matrix/NAME/go.mod,
# a module that pins another Kubernetes (k8s.io/kubernetes with its own
# replace block for the staging modules) and, if it requires one, another
# Karpenter (sigs.k8s.io/karpenter, whose kwok provider and CRDs are used;
# without it the set has the default set's Karpenter). etcd, kwok
# and helm are the default set's in every set (they only talk to the API
# server), built from ./go.mod and ./helm/go.mod into the set's own folder.
# A set's folder has the same layout under its own key, e.g.
#   k8s1.32.13-etcd3.6.8-karpenter1.2.0-kwok0.8.0-helm3.22.0
# so each set must differ from every other in its Kubernetes or Karpenter
# version.
# The empty name and "default" mean the default set.
#
# A binary is rebuilt when it is missing or when its stamp differs: the stamp
# holds the tool version, the Go version, the build flags and a hash of the
# go.mod/go.sum it was built from. Two runs at once are serialised with flock.
#
# The first build on a machine compiles Kubernetes, etcd, Karpenter, kwok and
# helm from source: ~10 minutes on 2 cores (measured: 588 s on a fresh HOME,
# downloads included; 823 s while other builds shared the cores), ~3.8 GB of
# GOCACHE, ~1.4 GB of module cache and 447 MB in the tools folder. After that a
# run takes well under a second.
#
# The bin dir also works as KUBEBUILDER_ASSETS for envtest (kube-apiserver,
# etcd, kubectl).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

print_dir=false
quiet=false
set_name="${APPORTION_TOOLS_SET:-}"
want_set=false
only=""
want_only=false
for arg in "$@"; do
	if $want_set; then
		set_name="$arg"
		want_set=false
		continue
	fi
	if $want_only; then
		only="$arg"
		want_only=false
		continue
	fi
	case "$arg" in
	--only) want_only=true ;;
	--only=*) only="${arg#--only=}" ;;
	--print-dir) print_dir=true ;;
	-q | --quiet) quiet=true ;;
	--set) want_set=true ;;
	--set=*) set_name="${arg#--set=}" ;;
	--list-sets)
		for d in "$here"/matrix/*/go.mod; do
			[[ -e "$d" ]] && basename "$(dirname "$d")"
		done
		exit 0
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "build.sh: unknown argument: $arg (try --help)" >&2
		exit 2
		;;
	esac
done
if $want_set; then
	echo "build.sh: --set needs a name (try --list-sets)" >&2
	exit 2
fi
if $want_only || [[ -n "$only" && ! "$only" =~ ^[a-z-]+(,[a-z-]+)*$ ]]; then
	echo "build.sh: --only needs a comma-separated list of binaries, e.g. --only helm,cosign" >&2
	exit 2
fi
if [[ -n "$only" && -n "$set_name" && "$set_name" != default ]]; then
	echo "build.sh: --only builds from the default set, not --set $set_name" >&2
	exit 2
fi

# The module Kubernetes and Karpenter come from: ./go.mod, or a set's.
if [[ -z "$set_name" || "$set_name" == default ]]; then
	set_name=default
	kmod="$here"
else
	if [[ ! "$set_name" =~ ^[A-Za-z0-9._-]+$ || ! -f "$here/matrix/$set_name/go.mod" ]]; then
		echo "build.sh: no tools set \"$set_name\" (no $here/matrix/$set_name/go.mod); sets: $(cd "$here/matrix" 2>/dev/null && ls -d -- */ 2>/dev/null | tr -d / | tr '\n' ' ')" >&2
		exit 2
	fi
	kmod="$here/matrix/$set_name"
fi

# The version a go.mod requires for a module path (first "path vX" line).
modver() {
	local v
	v="$(awk -v m="$1" '($1 == m || ($1 == "require" && $2 == m)) { for (i = 1; i <= NF; i++) if ($i ~ /^v[0-9]/) { print $i; exit } }' "$2")"
	if [[ -z "$v" ]]; then
		echo "build.sh: $2 does not require $1" >&2
		exit 1
	fi
	printf '%s\n' "$v"
}

# Whether a go.mod requires a module path.
requires() {
	awk -v m="$1" '($1 == m || ($1 == "require" && $2 == m)) { found = 1 } END { exit !found }' "$2"
}

# The module Karpenter comes from: the set's when it requires
# sigs.k8s.io/karpenter, else ./go.mod (a set that pairs another Kubernetes
# with the default set's Karpenter).
kpmod="$kmod"
if ! requires sigs.k8s.io/karpenter "$kmod/go.mod"; then
	kpmod="$here"
fi

K8S_VERSION="$(modver k8s.io/kubernetes "$kmod/go.mod")"
ETCD_VERSION="$(modver go.etcd.io/etcd/server/v3 "$here/go.mod")"
KARPENTER_VERSION="$(modver sigs.k8s.io/karpenter "$kpmod/go.mod")"
KWOK_VERSION="$(modver sigs.k8s.io/kwok "$here/go.mod")"
HELM_VERSION="$(modver helm.sh/helm/v3 "$here/helm/go.mod")"
COSIGN_VERSION="$(modver github.com/sigstore/cosign/v2 "$here/cosign/go.mod")"
PROMETHEUS_VERSION="$(modver github.com/prometheus/prometheus "$here/prometheus/go.mod")"
GO_VERSION="go$(awk '$1 == "go" { print $2; exit }' "$here/go.mod")"
if [[ "go$(awk '$1 == "go" { print $2; exit }' "$kmod/go.mod")" != "$GO_VERSION" ]]; then
	echo "build.sh: $kmod/go.mod must name the Go of $here/go.mod ($GO_VERSION)" >&2
	exit 1
fi

key="k8s${K8S_VERSION#v}-etcd${ETCD_VERSION#v}-karpenter${KARPENTER_VERSION#v}-kwok${KWOK_VERSION#v}-helm${HELM_VERSION#v}"
root="${APPORTION_TOOLS_DIR:-${HOME:?set HOME or APPORTION_TOOLS_DIR}/.cache/apportion/tools}"
dir="$root/$key"
bin="$dir/bin"

if $print_dir; then
	printf '%s\n' "$bin"
	exit 0
fi

log() { printf '%s\n' "$*" >&2; }

# --- Go -------------------------------------------------------------------
# Build with exactly the Go the go.mod files name (Karpenter v1.15 needs
# >= 1.26.9): the machine's default GOTOOLCHAIN=local with an older go refuses
# to build them, and a newer local go would build something other than what
# the stamps say. Go fetches that toolchain through the module proxy once.
if ! command -v go >/dev/null 2>&1; then
	if [[ -x /usr/local/go/bin/go ]]; then
		PATH="/usr/local/go/bin:$PATH"
	else
		log "build.sh: no go on PATH nor at /usr/local/go/bin/go"
		exit 1
	fi
fi
export GOTOOLCHAIN="$GO_VERSION"
# Our flags only: a GOFLAGS of the caller (-race, -tags, -mod=vendor, ...)
# would change what gets built without changing the stamps.
export GOFLAGS=
export CGO_ENABLED=0

sum_of() { cat "$@" | sha256sum | cut -c1-16; }
tools_sum="$(sum_of "$here/go.mod" "$here/go.sum")"
kmod_sum="$(sum_of "$kmod/go.mod" "$kmod/go.sum")"
kpmod_sum="$(sum_of "$kpmod/go.mod" "$kpmod/go.sum")"
helm_sum="$(sum_of "$here/helm/go.mod" "$here/helm/go.sum")"
cosign_sum="$(sum_of "$here/cosign/go.mod" "$here/cosign/go.sum")"
prometheus_sum="$(sum_of "$here/prometheus/go.mod" "$here/prometheus/go.sum")"

# Kubernetes' own release flags (hack/lib/golang.sh): static, stripped,
# -trimpath, tags selinux,notest,grpcnotrace. The same flags are used for every
# binary of ./go.mod so that they share compiled packages in GOCACHE.
tags="selinux,notest,grpcnotrace"
k8s_minor="${K8S_VERSION#v}"
k8s_minor="${k8s_minor#*.}"
k8s_minor="${k8s_minor%%.*}"
k8s_major="${K8S_VERSION#v}"
k8s_major="${k8s_major%%.*}"
# Without these the servers and kubectl report v0.0.0-master, which breaks
# version checks (kubectl's skew warning, Karpenter's and envtest's checks).
k8s_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$k8s_major -X $p.gitMinor=$k8s_minor"
done

# name | module dir | package | version | extra -ldflags | module sum
targets=(
	"kube-apiserver|$kmod|k8s.io/kubernetes/cmd/kube-apiserver|$K8S_VERSION|$k8s_ldflags|$kmod_sum"
	"kube-controller-manager|$kmod|k8s.io/kubernetes/cmd/kube-controller-manager|$K8S_VERSION|$k8s_ldflags|$kmod_sum"
	"kube-scheduler|$kmod|k8s.io/kubernetes/cmd/kube-scheduler|$K8S_VERSION|$k8s_ldflags|$kmod_sum"
	"kubectl|$kmod|k8s.io/kubernetes/cmd/kubectl|$K8S_VERSION|$k8s_ldflags|$kmod_sum"
	"etcd|$here|go.etcd.io/etcd/server/v3|$ETCD_VERSION||$tools_sum"
	"kwok|$here|sigs.k8s.io/kwok/cmd/kwok|$KWOK_VERSION||$tools_sum"
	"karpenter-kwok|$kpmod|sigs.k8s.io/karpenter/kwok|$KARPENTER_VERSION| -X sigs.k8s.io/karpenter/pkg/operator.Version=$KARPENTER_VERSION|$kpmod_sum"
	"helm|$here/helm|helm.sh/helm/v3/cmd/helm|$HELM_VERSION| -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION|$helm_sum"
	"cosign|$here/cosign|github.com/sigstore/cosign/v2/cmd/cosign|$COSIGN_VERSION| -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION|$cosign_sum"
	"prometheus|$here/prometheus|github.com/prometheus/prometheus/cmd/prometheus|$PROMETHEUS_VERSION| -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}|$prometheus_sum"
	"promtool|$here/prometheus|github.com/prometheus/prometheus/cmd/promtool|$PROMETHEUS_VERSION| -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}|$prometheus_sum"
)
# The compatibility matrix's sets run the cluster's programs only: cosign,
# Prometheus and promtool serve the chart suite and the release, which use
# the default set.
if [[ "$set_name" != default ]]; then
	kept=()
	for t in "${targets[@]}"; do
		case "${t%%|*}" in cosign | prometheus | promtool) ;; *) kept+=("$t") ;; esac
	done
	targets=("${kept[@]}")
fi

# --only: those binaries, nothing else (no CRDs or stages either).
if [[ -n "$only" ]]; then
	kept=()
	for n in ${only//,/ }; do
		found=false
		for t in "${targets[@]}"; do
			if [[ "${t%%|*}" == "$n" ]]; then
				kept+=("$t")
				found=true
			fi
		done
		if ! $found; then
			names=()
			for t in "${targets[@]}"; do names+=("${t%%|*}"); done
			echo "build.sh: --only: no binary \"$n\" (binaries: ${names[*]})" >&2
			exit 2
		fi
	done
	targets=("${kept[@]}")
fi

stamp_of() { # name pkg version ldflags sum
	printf 'name=%s pkg=%s version=%s go=%s cgo=0 trimpath tags=%s ldflags=%s mod=%s\n' \
		"$1" "$2" "$3" "$GO_VERSION" "$tags" "-s -w$4" "$5"
}

# data: Karpenter's CRDs and kwok's stages
data_stamp="karpenter=$KARPENTER_VERSION kwok=$KWOK_VERSION mod=$tools_sum layout=1"
if [[ "$set_name" != default ]]; then
	data_stamp+=" set=$set_name kmod=$kpmod_sum"
fi
stages=(
	node/fast/node-initialize.yaml
	node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
	pod/fast/pod-ready.yaml
	pod/fast/pod-complete.yaml
	pod/fast/pod-delete.yaml
)

# What needs doing? Sets todo (targets to build) and data_ok.
check() {
	todo=()
	local t name mdir pkg version ldflags msum want
	for t in "${targets[@]}"; do
		IFS='|' read -r name mdir pkg version ldflags msum <<<"$t"
		want="$(stamp_of "$name" "$pkg" "$version" "$ldflags" "$msum")"
		if [[ ! -x "$bin/$name" || "$(cat "$dir/.stamps/$name" 2>/dev/null)" != "$want" ]]; then
			todo+=("$t")
		fi
	done
	data_ok=false
	if [[ -n "$only" ]] || [[ "$(cat "$dir/.stamps/data" 2>/dev/null)" == "$data_stamp" && -s "$dir/stages.yaml" ]]; then
		data_ok=true
	fi
}
up_to_date() {
	$quiet || log "tools up to date in $dir"
	printf '%s\n' "$bin"
	exit 0
}

check
if [[ ${#todo[@]} -eq 0 ]] && $data_ok; then
	up_to_date
fi

mkdir -p "$bin" "$dir/.stamps"
# One builder per cache folder at a time (make e2e and make demo side by side).
exec 9>"$dir/.lock"
if ! flock -n 9; then
	log "waiting for another build.sh working on $dir ..."
	flock 9
	check # the other run may have built everything meanwhile
	if [[ ${#todo[@]} -eq 0 ]] && $data_ok; then
		up_to_date
	fi
fi

builder=""
cleanup() {
	# Interrupted mid-build: stop the go build we started (go stops its
	# compilers on SIGINT) and drop its half-written output.
	if [[ -n "$builder" ]]; then
		kill -INT "$builder" 2>/dev/null || true
		wait "$builder" 2>/dev/null || true
	fi
	rm -f "$bin"/.*.tmp
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_all=$SECONDS
if [[ ${#todo[@]} -gt 0 ]]; then
	names=()
	for t in "${todo[@]}"; do names+=("${t%%|*}"); done
	log "building ${#todo[@]} tool(s) into $bin: ${names[*]}"
	log "  set $set_name: k8s $K8S_VERSION, etcd $ETCD_VERSION, karpenter $KARPENTER_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION, $GO_VERSION"
	if [[ ${#todo[@]} -ge 4 ]]; then
		log "  the first (cold) build compiles all of them from source: ~10+ minutes on 2 cores, ~4 GB of GOCACHE;"
		log "  later runs reuse $dir and take well under a second"
	fi
	# Resolve the toolchain up front (the first time, go fetches $GO_VERSION).
	gover="$(cd "$here" && go env GOVERSION)"
	if [[ "$gover" != "$GO_VERSION" ]]; then
		log "build.sh: go resolved to $gover, want $GO_VERSION"
		exit 1
	fi
fi

i=0
for t in "${todo[@]}"; do
	i=$((i + 1))
	IFS='|' read -r name mdir pkg version ldflags msum <<<"$t"
	log "[$i/${#todo[@]}] $name ($pkg $version) ..."
	start=$SECONDS
	tmp="$bin/.$name.tmp"
	(cd "$mdir" && exec go build -mod=readonly -buildvcs=false -trimpath -tags "$tags" \
		-ldflags "-s -w$ldflags" -o "$tmp" "$pkg") &
	builder=$!
	# A line a minute, so a log (CI) shows the build is alive.
	next=60
	while kill -0 "$builder" 2>/dev/null; do
		sleep 1
		if ((SECONDS - start >= next)) && kill -0 "$builder" 2>/dev/null; then
			log "      ... $name still building (${next}s)"
			next=$((next + 60))
		fi
	done
	if ! wait "$builder"; then
		builder=""
		log "build.sh: building $name failed (see the go output above)"
		exit 1
	fi
	builder=""
	mv -f "$tmp" "$bin/$name"
	stamp_of "$name" "$pkg" "$version" "$ldflags" "$msum" >"$dir/.stamps/$name"
	log "      $name built in $((SECONDS - start))s ($(du -m "$bin/$name" | cut -f1) MB)"
done

if ! $data_ok; then
	log "copying Karpenter CRDs and kwok stages into $dir"
	# Karpenter's CRDs come from the Karpenter of the set in use.
	karpenter_dir="$(cd "$kpmod" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
	kwok_dir="$(cd "$here" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	if [[ -z "$karpenter_dir" || -z "$kwok_dir" ]]; then
		(cd "$kpmod" && go mod download sigs.k8s.io/karpenter)
		(cd "$here" && go mod download sigs.k8s.io/kwok)
		karpenter_dir="$(cd "$kpmod" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
		kwok_dir="$(cd "$here" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	fi
	rm -rf "$dir/crds" "$dir/stages"
	mkdir -p "$dir/crds" "$dir/stages"
	# Module cache files are read-only: install gives the copies mode 0644.
	# (v1.15 ships NodePool, NodeClaim, NodeOverlay and CapacityBuffer; older
	# releases fewer.)
	for f in "$karpenter_dir"/kwok/charts/crds/*.yaml "$karpenter_dir"/kwok/apis/crds/*.yaml; do
		install -m 0644 "$f" "$dir/crds/"
	done
	# kwok exits "no stages found" without these. --config takes a
	# multi-document file, so stages.yaml is all of them joined by "---".
	combined="$dir/.stages.yaml.tmp"
	: >"$combined"
	for s in "${stages[@]}"; do
		install -m 0644 "$kwok_dir/kustomize/stage/$s" "$dir/stages/"
		{
			printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$s"
			cat "$kwok_dir/kustomize/stage/$s"
		} >>"$combined"
	done
	mv -f "$combined" "$dir/stages.yaml"
	printf '%s\n' "$data_stamp" >"$dir/.stamps/data"
fi

cat >"$dir/versions.env.tmp" <<EOF
TOOLS_SET=$set_name
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$ETCD_VERSION
KARPENTER_VERSION=$KARPENTER_VERSION
KWOK_VERSION=$KWOK_VERSION
HELM_VERSION=$HELM_VERSION
COSIGN_VERSION=$COSIGN_VERSION
PROMETHEUS_VERSION=$PROMETHEUS_VERSION
GO_VERSION=$GO_VERSION
EOF
mv -f "$dir/versions.env.tmp" "$dir/versions.env"

log "tools ready in $dir: total $((SECONDS - start_all))s"
printf '%s\n' "$bin"
