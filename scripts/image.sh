#!/usr/bin/env bash
# Build the container image without a container engine (`just image`):
#
#   1. a static binary: `cargo build --profile image --target <host triple>` with
#      `-C target-feature=+crt-static` (glibc linked in; no libc needed at run time);
#   2. a CycloneDX JSON SBOM of the binary's crates (cargo-cyclonedx, pinned, installed into
#      the cache below on first use);
#   3. an OCI image FROM scratch assembled by go-containerregistry's crane (built from its Go
#      module by `scripts/e2e-build.sh crane`) through a registry that crane serves on
#      127.0.0.1 for the duration of the script: one layer with /otel-injector (root-owned,
#      0755), user 65532:65532, entrypoint ["/otel-injector"], cmd ["serve"], ports 9443 and
#      8080, org.opencontainers.image.* labels (also as manifest annotations).
#
# Output, for the host's architecture (amd64 or arm64; there is no cross build):
#
#   target/image/<arch>/oci/            the image as an OCI layout (`crane push DIR REF`)
#   target/image/<arch>/sbom.cdx.json   the SBOM (beside the image, not in it)
#   target/image/<arch>/image.env       VERSION, REVISION, CREATED, DIGEST, SIZE (bytes of
#                                       config + layer as stored in a registry), BINARY_SIZE
#
# Reproducible: the commit is `git rev-parse HEAD` (or OTEL_INJECTOR_GIT_COMMIT) and the date
# SOURCE_DATE_EPOCH (default: the commit's time), passed to the build (`--version`, as
# OTEL_INJECTOR_SOURCE_DATE_EPOCH) and to the labels; the layer's files carry that time.
# The same commit gives the same digest.
# Cached: cargo rebuilds only what changed; the image is reassembled only when the binary,
# the labels or this script changed (target/image/<arch>/inputs.sha256). Pushing is the
# release workflow's job (.github/workflows/release.yml): `crane push target/image/<arch>/oci`.
# IMAGE_SOURCE_URL overrides the source label (default: the project's GitHub repository).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CYCLONEDX_VERSION=0.5.9
SOURCE_URL="${IMAGE_SOURCE_URL:-https://github.com/otel-injector/otel-injector}"
PROFILE=image

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
case "$TRIPLE" in
x86_64-unknown-linux-gnu) ARCH=amd64 ;;
aarch64-unknown-linux-gnu) ARCH=arm64 ;;
*) log "unsupported host $TRIPLE (amd64 or arm64 Linux with glibc)"; exit 1 ;;
esac

VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
if [[ -n "${OTEL_INJECTOR_GIT_COMMIT:-}" ]]; then
    REVISION="$OTEL_INJECTOR_GIT_COMMIT"
else
    REVISION="$(git rev-parse HEAD)"
    [[ -z "$(git status --porcelain --untracked-files=no)" ]] \
        || log "warning: uncommitted changes are built but the image names $REVISION"
fi
export OTEL_INJECTOR_GIT_COMMIT="$REVISION"
# The date reaches build.rs under a name of its own: exporting SOURCE_DATE_EPOCH would rerun
# the `cc` crate's build scripts (ring, psm) and rebuild everything above them at each commit.
EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}"
export OTEL_INJECTOR_SOURCE_DATE_EPOCH="$EPOCH"
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"

CACHE_ROOT="${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}"
OUT="$ROOT/target/image/$ARCH"
mkdir -p "$OUT"

# 1. The static binary. RUSTFLAGS with an explicit --target reach only the target's crates,
#    not build scripts and proc macros (which must stay dynamic).
log "cargo build --profile $PROFILE --target $TRIPLE (static, $VERSION, $REVISION, $CREATED)"
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --profile "$PROFILE" --target "$TRIPLE" --bin otel-injector
BIN="$ROOT/target/$TRIPLE/$PROFILE/otel-injector"

# 2. The SBOM, from Cargo.lock and the dependency graph of the binary's target (no dev or
#    build-only dependencies).
CDX_DIR="$CACHE_ROOT/cargo-cyclonedx/$CYCLONEDX_VERSION"
CDX="$CDX_DIR/bin/cargo-cyclonedx"
if [[ ! -x "$CDX" ]]; then
    log "installing cargo-cyclonedx $CYCLONEDX_VERSION into $CDX_DIR (first run only)"
    t0=$SECONDS
    cargo install --quiet --locked --version "$CYCLONEDX_VERSION" --root "$CDX_DIR.tmp" cargo-cyclonedx
    rm -rf "$CDX_DIR" && mv "$CDX_DIR.tmp" "$CDX_DIR"
    log "cargo-cyclonedx built in $((SECONDS - t0)) s"
fi
WORK="$(mktemp -d)"
REGISTRY_PID=""
cleanup() {
    [[ -n "$REGISTRY_PID" ]] && kill "$REGISTRY_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
SBOM="$WORK/sbom.cdx.json"
"$CDX" cyclonedx --manifest-path "$ROOT/Cargo.toml" --format json --spec-version 1.5 \
    --target "$TRIPLE" --no-build-deps --override-filename sbom.cdx >&2
mv "$ROOT/sbom.cdx.json" "$SBOM"
# It writes one per workspace member; the end-to-end tests' is not the image's.
rm -f "$ROOT/e2e/sbom.cdx.json"

mv "$SBOM" "$OUT/sbom.cdx.json"

INPUTS="$(cat "$BIN" "$0" | sha256sum | cut -c1-64) $SOURCE_URL $CREATED $REVISION"
if [[ -f "$OUT/inputs.sha256" && "$(cat "$OUT/inputs.sha256")" == "$INPUTS" && -d "$OUT/oci" ]]; then
    log "image up to date: $OUT"
    echo "$OUT"
    exit 0
fi

# 3. The image.
CRANE="$("$ROOT/scripts/e2e-build.sh" crane | tail -n1)/crane"
mkdir -p "$WORK/rootfs"
install -m 0755 "$BIN" "$WORK/rootfs/otel-injector"
tar --create --file "$WORK/layer.tar" --directory "$WORK/rootfs" --format=gnu --sort=name \
    --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner otel-injector

"$CRANE" registry serve --address 127.0.0.1:0 2>"$WORK/registry.log" &
REGISTRY_PID=$!
for _ in $(seq 100); do
    PORT="$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$WORK/registry.log")"
    [[ -n "$PORT" ]] && break
    sleep 0.1
done
[[ -n "$PORT" ]] || { log "crane registry did not start: $(cat "$WORK/registry.log")"; exit 1; }
REF="127.0.0.1:$PORT/otel-injector:build"

LABELS=(
    "org.opencontainers.image.title=otel-injector"
    "org.opencontainers.image.description=OpenTelemetry auto-instrumentation admission webhook for Kubernetes"
    "org.opencontainers.image.source=$SOURCE_URL"
    "org.opencontainers.image.version=$VERSION"
    "org.opencontainers.image.revision=$REVISION"
    "org.opencontainers.image.created=$CREATED"
    "org.opencontainers.image.licenses=Apache-2.0"
)
MUTATE=(--set-platform "linux/$ARCH" --user 65532:65532 --entrypoint /otel-injector --cmd serve
    --exposed-ports 9443/tcp,8080/tcp)
for l in "${LABELS[@]}"; do MUTATE+=(--label "$l" --annotation "$l"); done

"$CRANE" append --insecure --oci-empty-base --new_layer "$WORK/layer.tar" --new_tag "$REF" >&2
"$CRANE" mutate --insecure "${MUTATE[@]}" --tag "$REF" "$REF" >&2
rm -rf "$OUT/oci.tmp"
"$CRANE" pull --insecure --format oci "$REF" "$OUT/oci.tmp"
DIGEST="$("$CRANE" digest --insecure "$REF")"
SIZE="$("$CRANE" manifest --insecure "$REF" \
    | python3 -c 'import json,sys; m=json.load(sys.stdin); print(m["config"]["size"]+sum(l["size"] for l in m["layers"]))')"

rm -rf "$OUT/oci" && mv "$OUT/oci.tmp" "$OUT/oci"
cat > "$OUT/image.env" <<EOF
VERSION=$VERSION
REVISION=$REVISION
CREATED=$CREATED
ARCH=$ARCH
DIGEST=$DIGEST
SIZE=$SIZE
BINARY_SIZE=$(stat -c %s "$BIN")
EOF
echo "$INPUTS" > "$OUT/inputs.sha256"
log "image $DIGEST: $SIZE bytes compressed, binary $(stat -c %s "$BIN") bytes -> $OUT"
echo "$OUT"
