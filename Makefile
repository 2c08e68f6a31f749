# apportion — run `make help` for the targets.
#
# Karpenter v1.15 needs Go >= 1.26.9; the machines default to GOTOOLCHAIN=local
# with an older Go, so let the go command fetch the toolchain go.mod names.
export GOTOOLCHAIN := auto

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO      ?= go
BIN     := $(CURDIR)/bin
MODULE  := github.com/apportion-dev/apportion
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The commit time: the image's time and the binaries' build date, so a
# commit builds the same bytes every time.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE := $(shell date -u -d '@$(SOURCE_DATE_EPOCH)' +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r '$(SOURCE_DATE_EPOCH)' +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w -X $(MODULE)/pkg/version.Version=$(VERSION) -X $(MODULE)/pkg/version.Commit=$(COMMIT) \
  -X $(MODULE)/pkg/version.BuildDate=$(BUILD_DATE)

# The newest golangci-lint v2. It is built by the Go that go.mod names, so it
# reads this code's Go version; its staticcheck runs staticcheck's default
# checks (.golangci.yml), so staticcheck is not installed on its own.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)

# controller-tools built against the k8s.io/api minor version go.mod uses.
CONTROLLER_GEN_VERSION := v0.21.0
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)

# actionlint checks .github/workflows in make verify. Its shellcheck and
# pyflakes checks are off: they would run only where those programs happen
# to be installed, and make verify must say the same on every machine.
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT := $(BIN)/actionlint-$(ACTIONLINT_VERSION)

FUZZTIME  ?= 30s
BENCHTIME ?= 1s

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/apportion
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/apportion ./cmd/apportion

# The container image without a container engine: both binaries
# cross-compiled statically, then the build tool hack/apportion-image (not
# part of the product) writes them as one multi-arch OCI image layout
# (hack/apportion-image/ociimage) and checks what it wrote. The image's time
# is SOURCE_DATE_EPOCH (default: the commit time), so a commit gives the same
# digests every time. IMAGE_TARBALL=FILE also writes an OCI
# archive (skopeo/podman/docker load); IMAGE_CA_BUNDLE=FILE picks the CA
# bundle (default: this machine's /etc/ssl/certs/ca-certificates.crt).
IMAGE_DIR         ?= $(BIN)/image
IMAGE_TARBALL     ?=
IMAGE_CA_BUNDLE   ?=
IMAGE_REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo $(COMMIT))

.PHONY: image
image: ## Write the linux/amd64 + linux/arm64 OCI image to bin/image (no docker needed)
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-amd64/apportion ./cmd/apportion
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-arm64/apportion ./cmd/apportion
	$(GO) run ./hack/apportion-image --amd64 $(BIN)/linux-amd64/apportion --arm64 $(BIN)/linux-arm64/apportion \
	  --version '$(VERSION)' --revision '$(IMAGE_REVISION)' --source-date-epoch '$(SOURCE_DATE_EPOCH)' --out '$(IMAGE_DIR)' \
	  $(if $(IMAGE_TARBALL),--tarball '$(IMAGE_TARBALL)') $(if $(IMAGE_CA_BUNDLE),--ca-bundle '$(IMAGE_CA_BUNDLE)')

# A release: `make release VERSION=vX.Y.Z` writes RELEASE_DIR (default
# bin/release, replaced whole): a static binary and its CycloneDX SBOM per
# platform of RELEASE_PLATFORMS (the Windows one ends .exe), the multi-arch
# image of its linux platforms (OCI layout image/ and the same as an OCI
# archive), the Helm chart(s) with version and appVersion X.Y.Z (the image
# tag the chart defaults to), the kubectl plugin's archive per platform and
# krew manifest (apportion.krew.yaml; KREW_URL_BASE is where the archives
# will be published, default the GitHub release) and SHA256SUMS over the
# files. The darwin and windows binaries are the CLI only: no image runs
# them.
# Everything carries the commit's time, so a commit releases the same bytes.
# `make release-push VERSION=vX.Y.Z REGISTRY=host[:port][/prefix]
# COSIGN_KEY=cosign.key` pushes the image as REGISTRY/apportion:X.Y.Z and the
# charts to oci://REGISTRY/charts, prints their digests, signs the image
# index and both charts by digest with cosign (the key's password in
# COSIGN_PASSWORD; no transparency log) and attaches the image's SBOMs and
# an SLSA provenance as attestations (docs/verifying-releases.md).
# UNSIGNED=1 pushes without signing; without a key or it, nothing is pushed.
# KEYLESS=1 signs instead with the OIDC identity of the CI that runs it
# (GitHub Actions: .github/workflows/release.yaml), the signatures recorded
# in the Rekor transparency log.
# INSECURE=1 for a registry on plain HTTP.
# hack/release does the steps besides compiling and packaging:
# hack/release/binaries.sh compiles RELEASE_JOBS platforms at a time (default:
# the number of cores), and hack/release/tools.sh picks helm (v3, >= v3.13.0)
# and cosign (v2, >= v2.2.1) from PATH when their versions fit, else builds
# only them from test/tools (`test/tools/build.sh --only`); HELM=path and
# COSIGN=path use those instead.
RELEASE_DIR       ?= $(BIN)/release
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
KREW_URL_BASE     ?=
REGISTRY          ?=
INSECURE          ?=
HELM              ?=
COSIGN_KEY        ?=
UNSIGNED          ?=
KEYLESS           ?=
COSIGN            ?=
BUILDER_ID        ?=
RELEASE_JOBS      ?=
RELEASE_TOOL      := $(GO) run ./hack/release
HELM_BIN           = $(if $(HELM),$(HELM),$$(hack/release/tools.sh helm))
COSIGN_BIN         = $(if $(COSIGN),$(COSIGN),$$(hack/release/tools.sh cosign))

.PHONY: release
release: ## make release VERSION=vX.Y.Z [HELM=path] [RELEASE_JOBS=N]: binaries (linux, darwin, windows; N platforms at a time, default the cores), SBOMs, multi-arch image, charts, krew plugin, SHA256SUMS in bin/release; helm from PATH if v3 >= 3.13, else built alone
	@case '$(origin VERSION)' in command*|environment*) ;; *) echo "make release needs VERSION=vX.Y.Z" >&2; exit 2;; esac
	@tag=$$($(RELEASE_TOOL) check-version '$(VERSION)'); \
	dir='$(RELEASE_DIR)'; \
	if [ -e "$$dir" ] && [ -n "$$(ls -A "$$dir")" ] && [ ! -e "$$dir/SHA256SUMS" ]; then \
	  echo "$$dir is not empty and holds no earlier release (no SHA256SUMS): not replacing it" >&2; exit 1; fi; \
	rm -rf "$$dir"; mkdir -p "$$dir"; \
	t0=$$SECONDS; \
	helm="$(HELM_BIN)"; \
	t1=$$SECONDS; \
	bins=(); \
	for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%%/*}; arch=$${p#*/}; out="$$dir/apportion_$${tag}_$${os}_$${arch}"; \
	  case "$$p" in linux/arm64) p=linux/arm64/v8;; esac; \
	  case "$$os" in linux) bins+=(--binary "$$p=$$out");; esac; \
	done; \
	if [ $${#bins[@]} -eq 0 ]; then echo "RELEASE_PLATFORMS has no linux platform for the image" >&2; exit 2; fi; \
	GO='$(GO)' LDFLAGS='$(LDFLAGS)' VERSION='$(VERSION)' SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' RELEASE_JOBS='$(RELEASE_JOBS)' \
	  hack/release/binaries.sh "$$dir" "$$tag" $(RELEASE_PLATFORMS); \
	t2=$$SECONDS; \
	$(GO) run ./hack/apportion-image "$${bins[@]}" --version '$(VERSION)' --revision '$(IMAGE_REVISION)' \
	  --source-date-epoch '$(SOURCE_DATE_EPOCH)' --out "$$dir/image" --tarball "$$dir/apportion_$${tag}_image.oci.tar" \
	  $(if $(IMAGE_CA_BUNDLE),--ca-bundle '$(IMAGE_CA_BUNDLE)'); \
	for c in chart chart-crd; do \
	  if [ -d "$$c" ]; then "$$helm" package "$$c" --version "$$tag" --app-version "$$tag" -d "$$dir"; fi; \
	done; \
	$(RELEASE_TOOL) normalize-chart --source-date-epoch '$(SOURCE_DATE_EPOCH)' "$$dir"/*.tgz; \
	$(RELEASE_TOOL) krew --dir "$$dir" --version '$(VERSION)' --source-date-epoch '$(SOURCE_DATE_EPOCH)' $(if $(KREW_URL_BASE),--url-base '$(KREW_URL_BASE)'); \
	$(RELEASE_TOOL) sums "$$dir"; \
	echo "$$dir/SHA256SUMS:"; cat "$$dir/SHA256SUMS"; \
	echo "make release: $$((SECONDS - t0))s: helm $$((t1 - t0))s, binaries $$((t2 - t1))s, image, charts and plugin $$((SECONDS - t2))s"

.PHONY: release-push
release-push: ## make release-push VERSION=vX.Y.Z REGISTRY=host[:port][/prefix] COSIGN_KEY=cosign.key [INSECURE=1] [HELM=path] [COSIGN=path]: push and sign what make release wrote (UNSIGNED=1: unsigned); cosign from PATH if v2 >= 2.2.1, else built alone
	@case '$(origin VERSION)' in command*|environment*) ;; *) echo "make release-push needs VERSION=vX.Y.Z" >&2; exit 2;; esac
	@test -n '$(REGISTRY)' || { echo "make release-push needs REGISTRY=host[:port][/prefix]" >&2; exit 2; }
	@test -n '$(COSIGN_KEY)$(UNSIGNED)$(KEYLESS)' || { echo "make release-push needs COSIGN_KEY=cosign.key (its password in COSIGN_PASSWORD) to sign the release, KEYLESS=1 to sign it with a CI's OIDC identity, or UNSIGNED=1 to push it unsigned" >&2; exit 2; }
	@helm="$(HELM_BIN)"; $(if $(COSIGN_KEY)$(KEYLESS),cosign="$(COSIGN_BIN)";) \
	$(RELEASE_TOOL) push --dir '$(RELEASE_DIR)' --version '$(VERSION)' --registry '$(REGISTRY)' \
	  $(if $(INSECURE),--insecure) --helm "$$helm" \
	  $(if $(COSIGN_KEY)$(KEYLESS),$(if $(COSIGN_KEY),--cosign-key '$(COSIGN_KEY)') $(if $(KEYLESS),--keyless) --cosign "$$cosign" --revision '$(IMAGE_REVISION)' \
	    --source-date-epoch '$(SOURCE_DATE_EPOCH)' $(if $(BUILDER_ID),--builder-id '$(BUILDER_ID)'),--unsigned)

# The unit tests a newcomer runs first: no race detector, and none of the
# tests that render the chart with helm (built from source, ~10 minutes the
# first time). CI runs test-race and test-chart after it.
.PHONY: test
test: ## Run the unit tests (test-race and test-chart run the rest)
	$(GO) test -count=1 ./...

.PHONY: test-race
test-race: ## Run the unit tests with the race detector
	$(GO) test -race -count=1 ./...

# The tests behind the build tag chart render the chart with the helm of
# test/tools (the one `make tools` builds, or built on first use) and check
# what it creates, its docs and RBAC table (test/chartrender,
# test/chartdocs), and its dashboard and alerts against the metrics
# apportion registers (test/monitoring, a module of its own), where
# promtool's unit tests (test/monitoring/testdata/alerts_test.yaml) fire and
# resolve each alert; promtool is the one test/tools/build.sh builds.
.PHONY: test-chart
test-chart: ## Render the chart with helm and check what it creates, its docs, RBAC table, dashboard and alerts (promtool test rules)
	$(GO) test -tags chart -count=1 ./test/chartdocs/ ./test/chartrender/
	promtool="$$(test/tools/build.sh --quiet)/promtool" && cd test/monitoring && PROMTOOL="$$promtool" $(GO) test -tags chart -count=1 ./...

# The CRDs go twice into the charts: chart/crds/, which helm installs with
# the apportion chart when they are missing and never upgrades, and
# chart-crd/templates/, the apportion-crd chart, whose helm upgrade updates
# them. The copies in chart-crd/templates/ are controller-gen's files with the
# annotations of chart-crd/templates/_helpers.tpl included under
# metadata.annotations (helm.sh/resource-policy: keep); every other .yaml
# there is removed, so a CRD dropped from pkg/apis leaves both charts.
# Then hack/refdocs writes the reference pages, docs/reference, from the
# metrics pkg/metrics registers, the CRDs and the Grafana dashboard.
.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate the API's deep copies and the CRDs in chart/crds and chart-crd/templates from pkg/apis, then docs/reference
	$(CONTROLLER_GEN) object paths=./pkg/apis/...
	$(CONTROLLER_GEN) crd paths=./pkg/apis/... output:crd:dir=chart/crds
	rm -f chart-crd/templates/*.yaml
	for crd in chart/crds/*.yaml; do \
	  out="chart-crd/templates/$${crd##*/}"; \
	  { echo "{{- /* Written by make generate from $$crd (controller-gen, from pkg/apis): do not edit. */ -}}"; \
	    awk '{ print } /^  annotations:$$/ && !done { print "    {{- include \"apportion-crd.annotations\" . | nindent 4 }}"; done = 1 } END { exit !done }' "$$crd"; \
	  } >"$$out" || { echo "$$crd: no metadata.annotations to add chart-crd's to" >&2; rm -f "$$out"; exit 1; }; \
	done
	$(GO) run ./hack/refdocs

.PHONY: docs
docs: ## Regenerate docs/reference (metrics, CRD fields, Grafana dashboard) from the code; make generate runs it too
	$(GO) run ./hack/refdocs

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/controller-gen $@

.PHONY: verify
verify: $(GOLANGCI_LINT) $(ACTIONLINT) generate ## gofmt, go vet, golangci-lint (.golangci.yml), go.mod tidiness, generated files current, no tracked file over 1 MiB or binary, Markdown links and anchors, GitHub workflows (actionlint, make targets); fails if anything would change
	@hack/verify-tree.sh
	$(GO) run ./hack/verify-links
	@out=$$(git status --porcelain -- 'pkg/apis/*/zz_generated.deepcopy.go' chart/crds chart-crd/templates); \
	  if [ -n "$$out" ]; then echo "make generate changed (commit the result):"; echo "$$out"; git diff -- pkg/apis chart/crds chart-crd/templates | head -50; exit 1; fi
	@out=$$(git status --porcelain -- docs/reference); \
	  if [ -n "$$out" ]; then echo "make generate changed the reference pages (commit the result):"; echo "$$out"; git diff -- docs/reference | head -50; exit 1; fi
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e,chart ./...
	$(GOLANGCI_LINT) run --allow-serial-runners ./...
	$(GOLANGCI_LINT) run --allow-serial-runners --build-tags e2e,chart ./...
	$(GO) mod tidy -diff
	$(ACTIONLINT) -shellcheck= -pyflakes=
	$(GO) test -count=1 ./test/workflows/

$(GOLANGCI_LINT):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/golangci-lint $@

$(ACTIONLINT):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
	mv $(BIN)/actionlint $@

.PHONY: tools
tools: ## Build the local control-plane programs once into ~/.cache/apportion/tools (the first time takes ~10 min on 2 cores)
	@test/tools/build.sh >/dev/null

.PHONY: e2e
e2e: tools ## Run the end-to-end suites on local clusters (kube-apiserver, Karpenter kwok provider, kwok; needs root)
	$(GO) test -tags e2e -count=1 -v -timeout 60m ./test/...

# The compatibility matrix (CONTRIBUTING.md, "Compatibility matrix"): the
# default tools set (test/tools/go.mod) is the newest Kubernetes/Karpenter
# pair and runs every suite (make e2e); each other set,
# test/tools/matrix/NAME/go.mod, runs the smoke suite. MATRIX_SETS picks some.
MATRIX_SETS ?= $(shell test/tools/build.sh --list-sets)

.PHONY: tools-matrix
tools-matrix: ## Build the tools sets of the compatibility matrix (each ~10 min the first time, cached after)
	@for set in $(MATRIX_SETS); do test/tools/build.sh --quiet --set "$$set" >/dev/null; done

.PHONY: e2e-matrix
e2e-matrix: tools-matrix ## Run the smoke suite on every other Kubernetes/Karpenter pair of the compatibility matrix (needs root)
	@status=0; summary=""; \
	  for set in $(MATRIX_SETS); do \
	    echo "== e2e-matrix: tools set $$set"; \
	    start=$$SECONDS; result=ok; \
	    APPORTION_TOOLS_SET="$$set" $(GO) test -tags e2e -count=1 -v -timeout 15m ./test/e2e/smoke/ || { result=FAIL; status=1; }; \
	    summary+="$$(printf '%-28s smoke  %-4s %4ss' "$$set" "$$result" "$$((SECONDS - start))")"$$'\n'; \
	  done; \
	  echo "== e2e-matrix (tools set, suite, result, duration):"; printf '%s' "$$summary"; \
	  exit $$status

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s)
	@for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: bench
bench: ## Run the benchmarks (ns/op, allocs/op)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

# The scale benchmark: ARGS go to the program, e.g.
# ARGS='--workloads 20 --replicas 100 --json /tmp/bench.json'
# (`go run ./test/benchscale -h` lists them). Not part of `make e2e`.
ARGS ?=

.PHONY: bench-scale
bench-scale: tools ## Burst 100 workloads × 100 replicas on a local cluster without and with apportion; print time, decisions/s, API calls, CPU, heap, webhook latency, splits (needs root)
	$(GO) run ./test/benchscale $(ARGS)

# The soak: DURATION of production churn on a local cluster with apportion
# helm-installed (2 replicas), measured each minute; results (minutes.csv,
# summary.json, soak.png, the components' logs) in SOAK_OUT. Exits 1 when a
# target fails. `go run ./test/soak -h` lists the other flags. Not part of
# `make e2e`; CI runs DURATION=10m.
DURATION ?= 1h
SOAK_OUT ?= $(BIN)/soak

.PHONY: soak
soak: tools ## DURATION (default 1h) of churn on a local cluster with apportion (rollouts, scaling, spot interruptions, NodePool limits, leader killed and frozen, helm upgrade, policies); per-minute quota, undecided pods, API writes, memory; PNG plot in SOAK_OUT (needs root)
	$(GO) run ./test/soak --duration $(DURATION) --out $(SOAK_OUT)

.PHONY: demo
demo: tools ## The main job: a local cluster with Karpenter (kwok), apportion released and helm-installed from a local OCI registry, the AWS sample webhooks' examples deployed, their split printed; stays running
	$(GO) run ./test/demo up

.PHONY: demo-status
demo-status: ## Print the split of the running demo again (e.g. after kubectl scale)
	$(GO) run ./test/demo status

.PHONY: demo-down
demo-down: ## Stop the demo (cluster, registry, apportion) and remove everything it left
	$(GO) run ./test/demo down

.PHONY: plan-examples
plan-examples: build ## Preview both example workloads (from the AWS sample webhooks) offline with `apportion plan` (no cluster)
	@for f in examples/*.yaml; do echo "== $$f"; $(BIN)/apportion plan -f $$f; echo; done

.PHONY: helm-lint
helm-lint: ## Lint chart/ and chart-crd/ (helm lint, then --strict), render them (chart/ in every certificate mode, without --kube-version, and with the optional parts on)
	@helm="$$(test/tools/build.sh --quiet)/helm"; \
	  image="controller.image.repository=registry.example.com/apportion"; \
	  echo "helm template: no controller.image.repository refused"; \
	  if "$$helm" template apportion chart/ -n apportion-system >/dev/null 2>&1; then \
	    echo "helm template: the chart renders without controller.image.repository" >&2; exit 1; \
	  fi; \
	  "$$helm" lint chart/ --set "$$image"; \
	  "$$helm" lint chart/ --strict --set "$$image"; \
	  "$$helm" lint chart-crd/ --strict; \
	  echo "helm template: apportion-crd"; \
	  "$$helm" template apportion-crd chart-crd/ -n apportion-system | grep 'helm.sh/resource-policy: keep' >/dev/null \
	    || { echo "helm template: the CRDs of chart-crd/ lack helm.sh/resource-policy: keep (run make generate)" >&2; exit 1; }; \
	  provided="certificates.provided.secretName=example-tls,certificates.provided.caBundle=Cg=="; \
	  for kube in 1.32.0 1.36.0; do \
	    for mode in self-managed cert-manager provided; do \
	      echo "helm template: Kubernetes $$kube, certificates.mode=$$mode"; \
	      "$$helm" template apportion chart/ -n apportion-system --kube-version "$$kube" \
	        --set "$$image,certificates.mode=$$mode,$$provided" >/dev/null; \
	    done; \
	  done; \
	  echo "helm template: no --kube-version (helm's built-in version, as kustomize's helmCharts)"; \
	  "$$helm" template apportion chart/ -n apportion-system --set "$$image" >/dev/null; \
	  echo "helm template: Kubernetes 1.31.14 refused (below the compatibility matrix's floor)"; \
	  if "$$helm" template apportion chart/ -n apportion-system --kube-version 1.31.14 --set "$$image" >/dev/null 2>&1; then \
	    echo "helm template: the chart renders for Kubernetes 1.31, below its floor 1.32" >&2; exit 1; \
	  fi; \
	  echo "helm template: hostNetwork, serviceMonitor, secure metrics, Grafana dashboard, PrometheusRule, image digest, 1 replica, no hook, rebalance, a global value"; \
	  "$$helm" template apportion chart/ -n apportion-system --kube-version 1.36.0 --set "$$image" \
	    --set hostNetwork=true,serviceMonitor.enabled=true,controller.metrics.secure=true,grafanaDashboard.enabled=true,prometheusRule.enabled=true,replicas=1,releaseGatesOnUninstall=false,settings.rebalance=true \
	    --set global.imageRegistry=registry.example.com \
	    --set controller.image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000 | grep 'pods/eviction' >/dev/null \
	    || { echo "helm template: settings.rebalance=true did not add pods/eviction to the ClusterRole" >&2; exit 1; }

.PHONY: clean
clean: ## Remove build output
	rm -rf $(BIN)
