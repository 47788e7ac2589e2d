# For users with a container engine (`just docker-image`): the same image as `just image`
# (scripts/image.sh, the tested path), with the same settings: a static glibc binary built
# with `--profile image` and `-C target-feature=+crt-static`, FROM scratch, user 65532:65532,
# entrypoint /otel-injector with cmd serve, ports 9443 and 8080, the same
# org.opencontainers.image.* labels. Pass the commit, its time and the version for
# `--version` and the labels, as the recipe does:
#
#   docker build --build-arg OTEL_INJECTOR_GIT_COMMIT="$(git rev-parse HEAD)" \
#     --build-arg SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" \
#     --build-arg CREATED="$(date -u -d @"$(git log -1 --format=%ct)" +%Y-%m-%dT%H:%M:%SZ)" \
#     --build-arg VERSION=0.1.0 -t otel-injector:dev .
#
# It cannot be built on the project's own machines (no container engine, no registry to pull
# the build stage's base image from), so the test suite checks scripts/image.sh's image, not
# this file's.
FROM rust:1.95.0-bookworm AS build
ARG OTEL_INJECTOR_GIT_COMMIT
ARG SOURCE_DATE_EPOCH
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY build ./build
COPY src ./src
COPY examples ./examples
COPY benches ./benches
# The workspace's other member, the end-to-end tests: cargo loads its manifest, so it and
# empty files at its targets' paths stand in for it; nothing of it is built.
COPY e2e/Cargo.toml ./e2e/
RUN mkdir -p e2e/tests && touch e2e/tests/main.rs e2e/demo.rs
RUN target="$(rustc -vV | sed -n 's/^host: //p')" \
    && RUSTFLAGS="-C target-feature=+crt-static" \
       cargo build --locked --profile image --target "$target" --package otel-injector --bin otel-injector \
    && install -D -m 0755 "target/$target/image/otel-injector" /out/otel-injector

FROM scratch
ARG OTEL_INJECTOR_GIT_COMMIT
ARG VERSION
ARG CREATED
COPY --from=build /out/otel-injector /otel-injector
LABEL org.opencontainers.image.title="otel-injector" \
      org.opencontainers.image.description="OpenTelemetry auto-instrumentation admission webhook for Kubernetes" \
      org.opencontainers.image.source="https://github.com/otel-injector/otel-injector" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${OTEL_INJECTOR_GIT_COMMIT}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/otel-injector"]
CMD ["serve"]
