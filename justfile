# Routine tasks. Run through ./scripts/just, which installs the pinned `just` on first use.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# The whole test suite: formatting, lints, unit and integration tests, the image, end-to-end
# tests.
test: lint unit image-test e2e

# Formatting and clippy (warnings are errors), the GitHub workflows, and the dependency graph.
lint: workflows deny
    cargo fmt --all -- --check
    cargo clippy --locked --workspace --all-targets --all-features -- -D warnings

# cargo-deny (pinned, built into the tools' cache on first use): licenses, banned crates and
# sources, as deny.toml says. Advisories are the release workflow's.
deny:
    scripts/cargo-deny.sh

# actionlint (built from its Go module) over .github/workflows/, with shellcheck (Debian's)
# on their `run:` scripts.
workflows: test-deps
    "$(scripts/e2e-build.sh actionlint | tail -n1)/actionlint" -no-color -shellcheck="$(command -v shellcheck)" -pyflakes=

# Unit and integration tests, no cluster needed: the library's, tests/engine, tests/servers,
# and tests/tools (feature `tools`: Helm and promtool built from their Go modules on first
# use, kubectl kustomize, bubblewrap). Plain `cargo test` runs all but tests/tools.
unit: test-deps promtool
    scripts/e2e-build.sh helm >/dev/null
    cargo test --locked --features tools

# Build (or find in the cache) promtool and promql-metrics from tools/promtool/ (the alert
# and dashboard checks of tests/tools/monitoring.rs).
promtool:
    scripts/e2e-build.sh promtool >/dev/null

# The Helm chart and the kustomize overlays: helm lint, helm template per mode, schema
# refusals, kubectl kustomize per overlay (the e2e suite applies them: e2e/tests/install.rs).
chart:
    scripts/e2e-build.sh helm >/dev/null
    cargo test --locked --features tools --test tools -- chart:: kustomize::

# Debian packages the tests use: bubblewrap and busybox (the web-server script tests, the
# image test), shellcheck (`just workflows`).
test-deps:
    scripts/test-deps.sh

# End-to-end tests through a real control plane, controllers, kwok node, collector and agents.
e2e: controlplane
    cargo test --locked -p otel-injector-e2e --test e2e -- --test-threads=2

# Build (or find in the cache) the e2e tools: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok, otelcol, helm, cert-manager (Go modules), and the agent and app images (Maven Central,
# npm, PyPI; installs bubblewrap when missing).
controlplane:
    scripts/e2e-build.sh all >/dev/null
    scripts/e2e-images.sh >/dev/null

# Start a real control plane and the webhook, inject an annotated pod and print it. Builds
# only what it uses: the control plane, kwok, the collector and the images (not Helm or
# cert-manager).
demo:
    scripts/e2e-build.sh controlplane >/dev/null
    scripts/e2e-build.sh kwok >/dev/null
    scripts/e2e-build.sh otelcol >/dev/null
    scripts/e2e-images.sh >/dev/null
    cargo run --locked --quiet -p otel-injector-e2e --example demo

# Write a development CA and serving certificate into certs/dev/.
certs *HOSTS:
    certs/generate.sh {{HOSTS}}

# Regenerate manifests/crd.yaml and the Helm chart's copy from the Rust types.
crd:
    cargo run --locked --quiet -- crd > manifests/crd.yaml
    cp manifests/crd.yaml charts/otel-injector/crds/instrumentations.yaml

# Write docs/flags.md again from the command line's definition (a unit test compares them).
flags-doc:
    OTEL_INJECTOR_WRITE_FLAGS_DOC=1 cargo test --locked --lib cli::reference -- --quiet

# Fuzz a target (`review` or `pod`); extra arguments go to libFuzzer, e.g. -runs=1000000.
fuzz target="review" *ARGS:
    scripts/fuzz.sh {{target}} {{ARGS}}

# Benchmarks of the admission path.
bench:
    cargo bench --locked --bench admission

# Server CPU per review under wrk (release build): a Deployment (the floor), a pod that asks
# for nothing, a pod injected with Java; their ratios to the floor. E.g. `just load --rounds 5`.
load *ARGS:
    scripts/load.sh {{ARGS}}

# Peak memory of a replica converting ConversionReviews of 1,000 and 6,000 Instrumentations,
# and ten 6,000-object reviews at once (release binary; docs/performance.md). E.g.
# `TEST_SERVER_BIN=/path/to/older/otel-injector just convert-memory` measures another build.
convert-memory:
    cargo build --locked --release --bin otel-injector
    TEST_SERVER_BIN="${TEST_SERVER_BIN:-$PWD/target/release/otel-injector}" cargo test --locked --test servers -- --ignored --nocapture conversion_memory

# What client-certificate authentication costs a caller (a fresh connection with its
# handshake, and a review on a kept connection) against the same server without it, in one
# run (release binary; docs/performance.md).
auth-cost:
    cargo build --locked --release --bin otel-injector
    TEST_SERVER_BIN="${TEST_SERVER_BIN:-$PWD/target/release/otel-injector}" cargo test --locked --test servers -- --ignored --nocapture auth_cost

# Pod-create latency through the real API server: no injection, the webhook, the policy
# (`otel-injector policy`), E2E_POLICY_PODS each (default 300); E2E_POLICY_ONLY_JAVA=1 binds
# the live render's Java policy alone; docs/performance.md.
policy-latency: controlplane
    cargo build --locked --release --bin otel-injector
    E2E_WEBHOOK_BIN="$PWD/target/release/otel-injector" cargo test --locked -p otel-injector-e2e --test e2e -- --ignored --nocapture policy::budgets::policy_latency

# A burst of pod creations through the real control plane and two webhook replicas behind
# one address: pods/s and create latency without and with the webhook, and a Deployment
# scaled 0 -> N (release binary). E.g. `E2E_BURST_PODS=5000 just burst`.
burst: controlplane
    cargo build --locked --release --bin otel-injector
    E2E_WEBHOOK_BIN="$PWD/target/release/otel-injector" cargo test --locked -p otel-injector-e2e --test e2e -- --ignored --nocapture burst::

# Half an hour of pod creations at 20/s through two replicas, the Instrumentation changed
# every 30 s: every pod injected with the spec of its time, memory and descriptors flat
# (release binary). E.g. `E2E_SOAK_MINUTES=5 just soak`.
soak: controlplane
    cargo build --locked --release --bin otel-injector
    E2E_WEBHOOK_BIN="$PWD/target/release/otel-injector" cargo test --locked -p otel-injector-e2e --test e2e -- --ignored --nocapture soak::

# The status controller's pod watch with 100,000 injected pods in the real API server: the
# resident memory of a replica following them and of one listing them (release binary;
# minutes). E.g. `E2E_SCALE_PODS=20000 just scale`.
scale: controlplane
    cargo build --locked --release --bin otel-injector
    E2E_WEBHOOK_BIN="$PWD/target/release/otel-injector" cargo test --locked -p otel-injector-e2e --test e2e -- --ignored --nocapture scale::

# Build the container image without a container engine: a static binary, a CycloneDX SBOM
# and an OCI layout assembled by crane, in target/image/<arch>/ (scripts/image.sh).
image:
    scripts/image.sh >/dev/null

# Check the image: its config (user, entrypoint, labels), its size, and its binary alone in
# a sandbox whose root is the image's layer: `--version` and one admission review.
image-test: image test-deps
    cargo test --locked --features tools --test tools -- --ignored image::

# Build the container image with a container engine (the Dockerfile: the same static binary,
# user, entrypoint and labels).
docker-image tag="otel-injector:dev":
    epoch="$(git log -1 --format=%ct)"; docker build -t {{tag}} \
        --build-arg OTEL_INJECTOR_GIT_COMMIT="$(git rev-parse HEAD)" --build-arg SOURCE_DATE_EPOCH="$epoch" \
        --build-arg CREATED="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
        --build-arg VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)" .
