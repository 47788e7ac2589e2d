# One build stage, a distroless static runtime, non-root.
FROM rust:1.95.0-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY examples ./examples
COPY benches ./benches
COPY tests ./tests
COPY e2e ./e2e
RUN cargo build --locked --release --target x86_64-unknown-linux-musl --bin otel-injector

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/otel-injector /otel-injector
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/otel-injector"]
CMD ["serve"]
