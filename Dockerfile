# syntax=docker/dockerfile:1
# The Oncegate consumer: a static binary on alpine (alpine rather than
# distroless for busybox wget, which docker-compose.yml's healthcheck uses
# on /readyz).
#
#   docker build -t oncegate/consumer \
#     --build-arg VERSION="$(git describe --tags --always)" --build-arg COMMIT="$(git rev-parse HEAD)" .
#   docker run --rm oncegate/consumer version
#   docker run --rm oncegate/consumer demo
#   docker run --rm -e ONCEGATE_NATS_URL=nats://nats.internal:4222 oncegate/consumer
#
# The base images are pinned to exact versions. To update one, change the
# tag; to pin a digest as well, append the one that
#   docker buildx imagetools inspect golang:1.26.8
# prints (FROM golang:1.26.8@sha256:…). cmd/consumer/compose_test.go fails
# on a floating tag.

FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS TARGETARCH
# The build context leaves out .git, so the binary has no VCS stamp: the
# version and commit come from these (consumer version, oncegate_build_info).
ARG VERSION=""
ARG COMMIT=""
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w \
      -X github.com/oncegate/oncegate/internal/version.version=${VERSION} \
      -X github.com/oncegate/oncegate/internal/version.commit=${COMMIT}" \
      -o /consumer ./cmd/consumer

FROM alpine:3.22.2
# A non-root user owning the data directory. A new named volume mounted on
# /var/lib/oncegate takes this ownership; a bind mount keeps the host's.
RUN adduser -D -H -u 10001 -s /sbin/nologin oncegate \
 && mkdir -p /var/lib/oncegate /etc/oncegate \
 && chown oncegate:oncegate /var/lib/oncegate
COPY --from=build /consumer /usr/local/bin/consumer
USER oncegate
WORKDIR /var/lib/oncegate
# /metrics, /healthz and /readyz with -metrics 0.0.0.0:9464; the webhook
# ingress with -ingress 0.0.0.0:8080.
EXPOSE 9464 8080
ENTRYPOINT ["/usr/local/bin/consumer"]
# The default command joins a NATS deployment: set ONCEGATE_NATS_URL (or
# pass -nats-url). Without one it exits saying so (-require-nats-url),
# rather than start an embedded server on the container's loopback, which
# no other container could reach. "consumer demo" needs no NATS.
CMD ["run", "-require-nats-url", "-data", "/var/lib/oncegate", "-metrics", "0.0.0.0:9464"]
