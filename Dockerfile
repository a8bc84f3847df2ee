# syntax=docker/dockerfile:1
# Build a static switchyard binary, then ship it alone in a distroless
# non-root image with an example config as the default. grpcnotrace: grpc,
# which the OTLP exporters link, leaves out golang.org/x/net/trace, whose
# debug pages' templates would make the linker keep every method of every
# type (5 MB of this binary, 3 MB of idle memory).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/switchyard ./cmd/switchyard

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/switchyard /usr/local/bin/switchyard
COPY examples/policies/dgx-spark-8node.yaml /etc/switchyard/switchyard.yaml
ENV SWITCHYARD_CONFIG=/etc/switchyard/switchyard.yaml
USER nonroot:nonroot
EXPOSE 8080 9090
# The admin API listens on every interface so that Prometheus can scrape
# /metrics. Protect it: set server.admin_token_env in your config (for
# example SWITCHYARD_ADMIN_TOKEN) and pass that variable to the container;
# serve warns at start when it is missing.
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["serve", "--admin-listen", "0.0.0.0:9090"]
