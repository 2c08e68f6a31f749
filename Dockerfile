# syntax=docker/dockerfile:1
# For machines with docker (buildx for both platforms):
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t apportion .
# Without a container engine (the dev machines and CI), `make image` writes
# the same image as an OCI layout to bin/image (hack/apportion-image): same
# user, entrypoint, working directory, environment and labels, on an empty
# base instead of distroless.
FROM --platform=$BUILDPLATFORM golang:1.26.9-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY pkg ./pkg
ARG VERSION=dev
ARG COMMIT=unknown
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/apportion-dev/apportion/pkg/version.Version=${VERSION} -X github.com/apportion-dev/apportion/pkg/version.Commit=${COMMIT}" \
      -o /out/apportion ./cmd/apportion

# distroless static: no shell, no package manager; CA certificates, passwd
# and group with nonroot (65532), /tmp 1777; works with a read-only root
# filesystem.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
ARG REVISION=${COMMIT}
ARG SOURCE=https://github.com/apportion-dev/apportion
LABEL org.opencontainers.image.title="apportion" \
      org.opencontainers.image.description="Proportional, architecture-aware pod placement for Kubernetes clusters that run Karpenter: admission webhook and controllers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /out/apportion /apportion
# distroless sets PATH and SSL_CERT_FILE; its nonroot working directory is
# /home/nonroot, the daemonless image's is /.
WORKDIR /
USER 65532:65532
ENTRYPOINT ["/apportion", "webhook"]
