#!/usr/bin/env bash
# Checks the dependency graph with cargo-deny (deny.toml: licenses, banned crates, sources),
# installing the pinned cargo-deny into the tools' cache on first use. Advisories need a
# network database and are left to the release workflow.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="0.20.2"
CACHE_ROOT="${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}"
DIR="$CACHE_ROOT/cargo-deny/$VERSION"
BIN="$DIR/bin/cargo-deny"
log() { printf '[cargo-deny %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ ! -x "$BIN" ]]; then
    mkdir -p "$CACHE_ROOT/logs"
    LOG="$CACHE_ROOT/logs/cargo-deny.log"
    log "building cargo-deny $VERSION (first run only; full output: $LOG)"
    t0=$SECONDS
    rm -rf "$DIR.tmp"
    if ! cargo install --locked --version "$VERSION" --root "$DIR.tmp" cargo-deny >"$LOG" 2>&1; then
        log "build failed after $((SECONDS - t0)) s; the end of $LOG:"
        tail -n 40 "$LOG" >&2
        exit 1
    fi
    rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
    log "built cargo-deny $VERSION in $((SECONDS - t0)) s"
fi
cd "$ROOT"
"$BIN" --locked check licenses bans sources
