# The walbox image: walbox and slotctl, static, on an empty base.
#
# Build it with deploy/image/build.sh, which compiles the two binaries with
# the Go toolchain of the machine (CGO_ENABLED=0, -trimpath, the version set
# with -ldflags) into dist/image/ and then builds this file with buildah (or
# docker). There is no build stage: nothing is pulled, so the image builds
# where no registry is reachable, and what CI tests (e2e TestImage) is what a
# user builds. See deploy/image/README.md.
FROM scratch
ARG VERSION=devel
ARG REVISION=unknown
LABEL org.opencontainers.image.title="walbox" \
      org.opencontainers.image.description="Transactional outbox relay: Postgres logical replication to Kafka" \
      org.opencontainers.image.source="https://github.com/walbox/walbox" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# The machine's CA bundle, for Kafka and Postgres TLS against public CAs.
COPY dist/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY dist/image/walbox dist/image/slotctl /usr/local/bin/
COPY migrations/*.sql /migrations/
# Metrics, /healthz and /readyz; bind beyond loopback inside a container.
ENV WALBOX_METRICS_ADDR=0.0.0.0:9187
EXPOSE 9187
# Nothing is written at run time: the root filesystem can be read-only.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/walbox"]
CMD ["run"]
