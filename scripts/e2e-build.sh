#!/usr/bin/env bash
# Build the real kube-apiserver (Kubernetes v1.37.2) and etcd from Go modules
# (module e2e/go.mod) into a per-machine cache, for the end-to-end tests.
#
#   scripts/e2e-build.sh            # prints the binary directory as the last stdout line
#   BIN=$(scripts/e2e-build.sh | tail -n1); "$BIN/kube-apiserver" --version
#
# Cache: ${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}/controlplane/<hash>/
# where <hash> = sha256(e2e/go.mod + e2e/go.sum), first 16 hex digits. If both binaries
# are there the script exits at once. Otherwise it builds them (a cold build takes many
# minutes on 2 cores) and moves them into place atomically. Progress goes to stderr.
# Go's own caches (GOMODCACHE, GOCACHE) are used as configured; they make rebuilds of a
# changed go.mod cheap. Set E2E_BUILD_VERBOSE=0 to drop `go build -v` package lines.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/e2e"
K8S_VERSION="v1.37.2"
K8S_MAJOR="1"
K8S_MINOR="37"

log() { printf '[e2e-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[[ -f "$MOD_DIR/go.mod" && -f "$MOD_DIR/go.sum" ]] || { log "missing $MOD_DIR/go.mod or go.sum"; exit 1; }

HASH="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" | sha256sum | cut -c1-16)"
CACHE_ROOT="${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}"
OUT="$CACHE_ROOT/controlplane/$HASH"

link_target() {
    # Optional convenience link: target/controlplane-bin -> $OUT (never fails the build).
    local t="$ROOT/target/controlplane-bin"
    if [[ -d "$ROOT/target" && ( -L "$t" || ! -e "$t" ) ]]; then
        ln -sfn "$OUT" "$t" 2>/dev/null || true
    fi
}

done_already() { [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" ]]; }

if done_already; then
    link_target
    echo "$OUT"
    exit 0
fi

mkdir -p "$OUT"
# One build at a time per cache entry; a second caller waits and then finds the binaries.
exec 9>"$OUT/.lock"
if ! flock -n 9; then
    log "another build of $OUT is running; waiting for it"
    flock 9
fi
if done_already; then
    link_target
    echo "$OUT"
    exit 0
fi

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
export GOTOOLCHAIN=local
export CGO_ENABLED=0   # static binaries, like the official release builds
GO_FLAGS=(-mod=readonly -trimpath)
[[ "${E2E_BUILD_VERBOSE:-1}" == "1" ]] && GO_FLAGS+=(-v)
VERSION_PKG="k8s.io/component-base/version"
LDFLAGS="-s -w -X $VERSION_PKG.gitVersion=$K8S_VERSION -X $VERSION_PKG.gitMajor=$K8S_MAJOR -X $VERSION_PKG.gitMinor=$K8S_MINOR -X $VERSION_PKG.gitTreeState=clean"

TMP="$(mktemp -d "$OUT/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

log "$(go version); cache entry $OUT"
log "building into $TMP (GOMODCACHE=$(go env GOMODCACHE), GOCACHE=$(go env GOCACHE))"
START=$SECONDS

build() { # name package
    local name="$1" pkg="$2" t0=$SECONDS
    if [[ -x "$OUT/$name" ]]; then
        log "$name already built"
        return
    fi
    log "go build $pkg -> $name"
    (cd "$MOD_DIR" && go build "${GO_FLAGS[@]}" -ldflags "$LDFLAGS" -o "$TMP/$name" "$pkg")
    mv -f "$TMP/$name" "$OUT/$name"   # rename within one filesystem: atomic
    log "$name done in $((SECONDS - t0)) s"
}

build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

{
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$((SECONDS - START))"
    echo "go=$(go version)"
    echo "kube-apiserver=$K8S_VERSION"
    echo "etcd=$(cd "$MOD_DIR" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
} > "$OUT/build-info.txt"
log "both binaries built in $((SECONDS - START)) s"
link_target
echo "$OUT"
