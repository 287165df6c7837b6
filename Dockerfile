# The image the Helm chart runs, ghcr.io/dralens/dralens:<appVersion>, for CI with registry
# access:
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/dralens/dralens:0.1.0 .
# `make image` builds the same content without a daemon or a registry, from Debian packages only
# (.ci/image/build-oci.sh); both read .ci/image/runtime-packages and .ci/image/dpkg-excludes.

# Build stage: the build packages of .ci/install-deps, then only the dralens binary, stripped.
FROM debian:bookworm AS build
COPY .ci/install-deps /src/.ci/install-deps
RUN /src/.ci/install-deps build
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRALENS_BUILD_TESTS=OFF \
    && cmake --build /build --target dralens \
    && strip --strip-unneeded -o /dralens /build/dralens

# Runtime stage: bookworm-slim plus the shared libraries the binary links; no documentation,
# manual pages, translations or apt lists.
FROM debian:bookworm-slim
COPY .ci/image/dpkg-excludes /etc/dpkg/dpkg.cfg.d/dralens-slim
COPY .ci/image/runtime-packages /tmp/runtime-packages
RUN apt-get update \
    && grep -v '^\s*#' /tmp/runtime-packages \
       | DEBIAN_FRONTEND=noninteractive xargs apt-get install -y --no-install-recommends \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /tmp/runtime-packages
COPY --from=build /dralens /usr/bin/dralens
ARG REVISION=unknown
LABEL org.opencontainers.image.title="dralens" \
      org.opencontainers.image.description="Kubernetes DRA driver for GPUs with observability built in" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.source="https://github.com/dralens/dralens" \
      org.opencontainers.image.revision="${REVISION}"
ENTRYPOINT ["/usr/bin/dralens"]
