#!/usr/bin/env bash
# Build the end-to-end tests' Go tools from Go modules into a per-machine cache:
#
#   scripts/e2e-build.sh [controlplane]  # etcd v3.7.0, kube-apiserver, kube-controller-manager,
#                                        # kube-scheduler (Kubernetes v1.37.2), module e2e/
#   scripts/e2e-build.sh kwok            # kwok v0.8.0 (simulated nodes), module e2e/kwok/
#   scripts/e2e-build.sh otelcol         # OpenTelemetry Collector v0.161.0 (OTLP receiver,
#                                        # file exporter), module e2e/otelcol/
#   scripts/e2e-build.sh helm            # Helm v4.3.2 (the chart's lint, template and install
#                                        # tests), module e2e/helm/
#   scripts/e2e-build.sh promtool        # promtool (Prometheus v3.16.0, Go module v0.316.0) and
#                                        # promql-metrics (module tools/promtool/): the alert
#                                        # and dashboard checks of tests/tools/monitoring.rs
#   scripts/e2e-build.sh certmanager     # cert-manager v1.21.2 controller + cainjector (one
#                                        # binary, `cert-manager controller|cainjector`) and
#                                        # crds.yaml rendered from its chart, module e2e/certmanager/
#   scripts/e2e-build.sh all             # controlplane, kwok, otelcol, helm, certmanager, one
#                                        # directory per line
#   scripts/e2e-build.sh crane           # go-containerregistry's crane v0.22.1 (assembles the
#                                        # image, scripts/image.sh), module tools/crane/
#   scripts/e2e-build.sh actionlint      # actionlint v1.7.12 (lints .github/workflows/, just
#                                        # lint), module tools/actionlint/
#
# Prints the binary directory as the last stdout line (BIN=$(scripts/e2e-build.sh | tail -n1)).
#
# Cache: ${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}/<tool>/<hash>/
# where <hash> = sha256 of the module's go.mod, go.sum and *.go files, first 16 hex digits
# (the versions are pinned there). If every binary is there the script exits at once.
# Otherwise it builds the missing ones (a cold controlplane build takes many minutes on 2
# cores) and moves each into place atomically. Progress goes to stderr. Go's own caches
# (GOMODCACHE, GOCACHE) are used as configured; they make rebuilds of a changed go.mod cheap.
# A build prints two lines to stderr, when it starts and when it ends (tool, versions,
# seconds); Go's full output goes to $CACHE_ROOT/logs/<tool>.log, printed (its last lines) only
# when the build fails. E2E_BUILD_VERBOSE=1 streams it instead, with `go build -v`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL="${1:-controlplane}"

if [[ "$TOOL" == all ]]; then
    for t in controlplane kwok otelcol helm certmanager; do "$0" "$t" | tail -n1; done
    exit 0
fi

K8S_VERSION="v1.37.2"
VERSION_PKG="k8s.io/component-base/version"
case "$TOOL" in
controlplane)
    MOD_DIR="$ROOT/e2e"
    BINARIES=(
        "etcd go.etcd.io/etcd/server/v3"
        "kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver"
        "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager"
        "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler"
    )
    LDFLAGS="-s -w -X $VERSION_PKG.gitVersion=$K8S_VERSION -X $VERSION_PKG.gitMajor=1 -X $VERSION_PKG.gitMinor=37 -X $VERSION_PKG.gitTreeState=clean"
    ;;
kwok)
    MOD_DIR="$ROOT/e2e/kwok"
    BINARIES=("kwok sigs.k8s.io/kwok/cmd/kwok")
    LDFLAGS="-s -w"
    ;;
otelcol)
    MOD_DIR="$ROOT/e2e/otelcol"
    BINARIES=("otelcol .")
    LDFLAGS="-s -w"
    ;;
promtool)
    MOD_DIR="$ROOT/tools/promtool"
    BINARIES=(
        "promtool github.com/prometheus/prometheus/cmd/promtool"
        "promql-metrics ."
    )
    LDFLAGS="-s -w -X github.com/prometheus/common/version.Version=3.16.0 -X github.com/prometheus/common/version.Branch=v0.316.0"
    ;;
helm)
    MOD_DIR="$ROOT/e2e/helm"
    BINARIES=("helm helm.sh/helm/v4/cmd/helm")
    LDFLAGS="-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2 -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
    ;;
certmanager)
    # cert-manager's cmd/ modules are not on the module proxy: main.go wires the main module's
    # controllers and injector (see its comment). crds.yaml: the chart's CRD templates, rendered.
    MOD_DIR="$ROOT/e2e/certmanager"
    BINARIES=("cert-manager .")
    LDFLAGS="-s -w"
    EXTRA_OUTPUT="crds.yaml"
    ;;
crane)
    MOD_DIR="$ROOT/tools/crane"
    BINARIES=("crane github.com/google/go-containerregistry/cmd/crane")
    LDFLAGS="-s -w"
    ;;
actionlint)
    MOD_DIR="$ROOT/tools/actionlint"
    BINARIES=("actionlint github.com/rhysd/actionlint/cmd/actionlint")
    LDFLAGS="-s -w"
    ;;
*)
    echo "usage: $0 [controlplane|kwok|otelcol|helm|certmanager|promtool|crane|actionlint|all]" >&2
    exit 2
    ;;
esac

say() { printf '[e2e-build %s %s] %s\n' "$TOOL" "$(date +%H:%M:%S)" "$*" >&2; }
VERBOSE="${E2E_BUILD_VERBOSE:-0}"
# Progress: to stderr when verbose, else to the build's log file (once it is open).
log() { if [[ "$VERBOSE" == 1 || -z "${LOG_FILE:-}" ]]; then say "$@"; else say "$@" 2>>"$LOG_FILE"; fi; }

[[ -f "$MOD_DIR/go.mod" && -f "$MOD_DIR/go.sum" ]] || { log "missing $MOD_DIR/go.mod or go.sum"; exit 1; }

# The controlplane's hash stays the one of go.mod + go.sum (its tools.go only lists imports).
if [[ "$TOOL" == controlplane ]]; then
    HASH="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" | sha256sum | cut -c1-16)"
else
    HASH="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" "$MOD_DIR"/*.go | sha256sum | cut -c1-16)"
fi
CACHE_ROOT="${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}"
OUT="$CACHE_ROOT/$TOOL/$HASH"

link_target() {
    # Optional convenience link: target/<tool>-bin -> $OUT (never fails the build).
    local t="$ROOT/target/$TOOL-bin"
    if [[ -d "$ROOT/target" && ( -L "$t" || ! -e "$t" ) ]]; then
        ln -sfn "$OUT" "$t" 2>/dev/null || true
    fi
}

done_already() {
    local b
    for b in "${BINARIES[@]}"; do [[ -x "$OUT/${b%% *}" ]] || return 1; done
    [[ -z "${EXTRA_OUTPUT:-}" || -f "$OUT/$EXTRA_OUTPUT" ]]
}

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

command -v go >/dev/null || { say "go not found in PATH"; exit 1; }
export GOTOOLCHAIN=local
export CGO_ENABLED=0   # static binaries, like the official release builds
GO_FLAGS=(-mod=readonly -trimpath)
[[ "$VERBOSE" == 1 ]] && GO_FLAGS+=(-v)

# The pinned versions, as `go list` reads them from the module (one line each).
mod_version() { (cd "$MOD_DIR" && go list -m -f '{{.Version}}' "$1"); }
versions() {
    case "$TOOL" in
    controlplane)
        echo "kubernetes=$K8S_VERSION"
        echo "etcd=$(mod_version go.etcd.io/etcd/server/v3)"
        ;;
    kwok) echo "kwok=$(mod_version sigs.k8s.io/kwok)" ;;
    otelcol) echo "otelcol=$(mod_version go.opentelemetry.io/collector/otelcol)" ;;
    promtool) echo "prometheus=$(mod_version github.com/prometheus/prometheus)" ;;
    helm) echo "helm=$(mod_version helm.sh/helm/v4)" ;;
    certmanager) echo "cert-manager=$(mod_version github.com/cert-manager/cert-manager)" ;;
    crane) echo "crane=$(mod_version github.com/google/go-containerregistry)" ;;
    actionlint) echo "actionlint=$(mod_version github.com/rhysd/actionlint)" ;;
    esac
}

TMP="$(mktemp -d "$OUT/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$CACHE_ROOT/logs"
LOG_FILE="$CACHE_ROOT/logs/$TOOL.log"
: > "$LOG_FILE"
VERSIONS="$(versions 2>>"$LOG_FILE" | paste -sd' ' -)"
START=$SECONDS
if [[ "$VERBOSE" == 1 ]]; then
    LOG_FILE=""
else
    say "building $VERSIONS (full output: $LOG_FILE)"
    # A failure shows what Go said, then exits with its status.
    trap 'rc=$?; rm -rf "$TMP"; if (( rc != 0 )); then say "build failed after $((SECONDS - START)) s; the end of $LOG_FILE:"; tail -n 40 "$LOG_FILE" >&2; fi' EXIT
fi

log "$(go version); cache entry $OUT"
log "building into $TMP (GOMODCACHE=$(go env GOMODCACHE), GOCACHE=$(go env GOCACHE))"

build() { # name package
    local name="$1" pkg="$2" t0=$SECONDS
    if [[ -x "$OUT/$name" ]]; then
        log "$name already built"
        return
    fi
    log "go build $pkg -> $name"
    if [[ -n "${LOG_FILE:-}" ]]; then
        (cd "$MOD_DIR" && go build "${GO_FLAGS[@]}" -ldflags "$LDFLAGS" -o "$TMP/$name" "$pkg") >>"$LOG_FILE" 2>&1
    else
        (cd "$MOD_DIR" && go build "${GO_FLAGS[@]}" -ldflags "$LDFLAGS" -o "$TMP/$name" "$pkg")
    fi
    mv -f "$TMP/$name" "$OUT/$name"   # rename within one filesystem: atomic
    log "$name done in $((SECONDS - t0)) s"
}

for b in "${BINARIES[@]}"; do build ${b}; done

if [[ "$TOOL" == certmanager ]]; then
    CM_VERSION="$(mod_version github.com/cert-manager/cert-manager)"
    CM_DIR="$(cd "$MOD_DIR" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
    log "rendering the CRDs of $CM_DIR/deploy/charts/cert-manager"
    "$OUT/cert-manager" crds "$CM_DIR/deploy/charts/cert-manager" "$CM_VERSION" > "$TMP/crds.yaml" 2>>"${LOG_FILE:-/dev/stderr}"
    mv -f "$TMP/crds.yaml" "$OUT/crds.yaml"
fi

{
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$((SECONDS - START))"
    echo "go=$(go version)"
    echo "$VERSIONS" | tr ' ' '\n'
} > "$OUT/build-info.txt"
say "built $VERSIONS in $((SECONDS - START)) s"
link_target
echo "$OUT"
