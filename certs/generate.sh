#!/usr/bin/env bash
# Writes a development CA and a serving certificate signed by it into certs/dev/
# (ca.crt, ca.key, tls.crt, tls.key). Extra arguments are the certificate's hosts
# (DNS names or IPs); by default localhost, 127.0.0.1 and the in-cluster Service name.
# Production clusters use cert-manager instead (manifests/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OTEL_INJECTOR_CERTS_DIR:-$root/certs/dev}"
hosts=()
for h in "$@"; do hosts+=(--host "$h"); done
cargo run --quiet --locked --manifest-path "$root/Cargo.toml" -- dev-certs --out-dir "$out" "${hosts[@]}"
