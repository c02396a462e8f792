# Multi-stage build: static walbox and slotctl binaries on an empty base.
# (Docker cannot run on the development machines of this project; this file
# is kept simple so it is easy to verify by reading.)
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/walbox ./cmd/walbox \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/slotctl ./cmd/slotctl

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/walbox /out/slotctl /usr/local/bin/
COPY migrations/*.sql /migrations/
# Metrics and /healthz; bind beyond loopback inside a container.
ENV WALBOX_METRICS_ADDR=0.0.0.0:9187
EXPOSE 9187
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/walbox"]
CMD ["run"]
