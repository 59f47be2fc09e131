# syntax=docker/dockerfile:1
# The same image deploy/imagebuild writes without a container engine: its
# build stage runs imagebuild --rootfs, so both hold the same files; the
# final stage's config matches imagebuild's (a test compares them).
# imagebuild is in deploy's own module and builds the gateway at the root,
# on the main module's go.mod (only the gateway's modules are downloaded
# ahead; imagebuild's few come with go run, not deploy's test tail).
#   docker build -t infergate --build-arg VERSION=$(git describe --tags --always) .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=0
ARG TARGETARCH=amd64
RUN cd deploy && go run ./imagebuild --rootfs /rootfs --platforms linux/${TARGETARCH} \
      --version "${VERSION}" --revision "${REVISION}" --created "${CREATED}"

FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
COPY --from=build /rootfs/ /
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
WORKDIR /
EXPOSE 8080/tcp 9464/tcp
LABEL org.opencontainers.image.title="infergate" \
      org.opencontainers.image.description="Reverse proxy and load generator for OpenAI-compatible LLM inference servers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/infergate/infergate"
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/infergate"]
CMD ["serve", "--listen", ":8080", "--admin-listen", "127.0.0.1:9464"]
