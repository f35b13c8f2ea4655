# syntax=docker/dockerfile:1
# The Oncegate consumer: a static binary on alpine (alpine rather than
# distroless for busybox wget, which docker-compose.yml's healthcheck uses
# on /readyz).
#
#   docker build -t oncegate/consumer .
#   docker run --rm oncegate/consumer demo

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /consumer ./cmd/consumer

FROM alpine:3.22
# A non-root user owning the data directory. A new named volume mounted on
# /var/lib/oncegate takes this ownership; a bind mount keeps the host's.
RUN adduser -D -H -u 10001 -s /sbin/nologin oncegate \
 && mkdir -p /var/lib/oncegate /etc/oncegate \
 && chown oncegate:oncegate /var/lib/oncegate
COPY --from=build /consumer /usr/local/bin/consumer
USER oncegate
WORKDIR /var/lib/oncegate
# /metrics, /healthz and /readyz with -metrics 0.0.0.0:9464.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/consumer"]
# Without a NATS URL, run starts an embedded server (on loopback, inside the
# container); docker-compose.yml runs it against a NATS service instead.
CMD ["run", "-data", "/var/lib/oncegate", "-metrics", "0.0.0.0:9464"]
