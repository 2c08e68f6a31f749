# syntax=docker/dockerfile:1
# Build: docker build -t apportion .   (no docker engine on the dev machines;
# CI builds the binary with `make build` and the chart issue wires the image.)
FROM golang:1.26.9-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY pkg ./pkg
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/apportion-dev/apportion/pkg/version.Version=${VERSION} -X github.com/apportion-dev/apportion/pkg/version.Commit=${COMMIT}" \
      -o /out/apportion ./cmd/apportion

# distroless static: no shell, no package manager; runs as uid 65532 and
# works with a read-only root filesystem.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/apportion /apportion
USER 65532:65532
ENTRYPOINT ["/apportion"]
