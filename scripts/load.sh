#!/usr/bin/env bash
# CPU per review of the real `otel-injector serve` binary under `wrk`, for three reviews in
# one run, and their ratios to the cheapest one:
#
#   floor   a Deployment CREATE (tests/data/deployment-create.json): TLS, HTTP, the envelope
#           parse and the answer; the object is never decoded
#   noop    a Pod CREATE that asks for nothing (tests/data/pod-create-inject-java.json
#           without its inject-java annotation)
#   inject  the same Pod with `inject-java: "true"`, the Java Instrumentation of
#           tests/data/instrumentations/java-load.yaml in its namespace
#
#   scripts/load.sh [--duration S] [--warmup S] [--connections N] [--rounds N]
#                   [--log-level LEVEL] [--binary PATH] [--keep] [--profile DIR] [--no-pin]
#
# Server CPU is user+system time of every thread, from /proc/<pid>/stat before and after each
# measured phase, divided by the requests wrk completed in that phase. On a machine of two or
# more CPUs, wrk runs on the last one and the server on the others (`taskset`), so that the
# two never take turns on one CPU (on the 2-CPU machine, five runs of one binary spread
# 2.41-2.47x pinned, three unpinned 2.34-2.69x); --no-pin lets the scheduler place them.
# Phases alternate floor, noop, inject for --rounds rounds; the table gives every phase and the medians.
# wrk (Debian's package) is installed when missing; the binary is a release build
# (`cargo build --release --locked`) unless --binary names one. Everything listens on
# 127.0.0.1 and stops on its own; the temp dir (certs, logs) is removed unless --keep.
# --profile DIR: after the measured rounds, one more phase per review under
# `perf record -g` (Debian's linux-perf, installed when missing), and the top symbols of each
# written to DIR/<review>.txt (DIR/<review>.data keeps the samples).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION=10
WARMUP=2
CONNECTIONS=25
ROUNDS=3
LOG_LEVEL=info
BINARY=""
KEEP=0
PROFILE=""
PIN=1
while [[ $# -gt 0 ]]; do
    case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --connections) CONNECTIONS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --log-level) LOG_LEVEL="$2"; shift 2 ;;
    --binary) BINARY="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --profile) PROFILE="$2"; shift 2 ;;
    --no-pin) PIN=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "load.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
for n in "$DURATION" "$WARMUP" "$CONNECTIONS" "$ROUNDS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "load.sh: not a whole number: $n" >&2; exit 2; }
done
(( DURATION >= 1 && DURATION <= 60 && ROUNDS >= 1 && ROUNDS <= 10 )) ||
    { echo "load.sh: --duration 1..60, --rounds 1..10" >&2; exit 2; }

if ! command -v wrk >/dev/null; then
    echo "[load] installing wrk (Debian)" >&2
    apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
if [[ -n "$PROFILE" ]] && ! command -v perf >/dev/null; then
    echo "[load] installing perf (Debian's linux-perf)" >&2
    apt-get install -y linux-perf >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y linux-perf >/dev/null; }
fi
if [[ -z "$BINARY" ]]; then
    (cd "$ROOT" && cargo build --release --locked --quiet)
    BINARY="$ROOT/target/release/otel-injector"
fi

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
    [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    if [[ "$KEEP" == 1 ]]; then echo "[load] kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# The three reviews.
cp "$ROOT/tests/data/deployment-create.json" "$TMP/floor.json"
cp "$ROOT/tests/data/pod-create-inject-java.json" "$TMP/inject.json"
python3 - "$TMP/inject.json" "$TMP/noop.json" <<'EOF'
import json, sys
review = json.load(open(sys.argv[1]))
meta = review["request"]["object"]["metadata"]
key = "instrumentation.opentelemetry.io/inject-java"
del meta["annotations"][key]
for entry in meta.get("managedFields", []):
    entry["fieldsV1"]["f:metadata"]["f:annotations"].pop("f:" + key, None)
text = json.dumps(review, separators=(",", ":"))
assert "instrumentation.opentelemetry.io/inject-" not in text
open(sys.argv[2], "w").write(text)
EOF
for s in floor noop inject; do
    cat >"$TMP/$s.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open("$TMP/$s.json", "rb"))
wrk.body = f:read("*a")
f:close()
EOF
done

# CPU placement: wrk on the last CPU, the server on the others.
CPUS="$(nproc)"
SERVER_ON=()
WRK_ON=()
if [[ "$PIN" == 1 ]] && (( CPUS >= 2 )) && command -v taskset >/dev/null; then
    SERVER_CPUS="0"
    (( CPUS > 2 )) && SERVER_CPUS="0-$((CPUS - 2))"
    WRK_CPU="$((CPUS - 1))"
    SERVER_ON=(taskset -c "$SERVER_CPUS")
    WRK_ON=(taskset -c "$WRK_CPU")
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
WEBHOOK_PORT="$(free_port)"
ADMIN_PORT="$(free_port)"
"$BINARY" dev-certs --out-dir "$TMP/certs" --host 127.0.0.1 >/dev/null
"${SERVER_ON[@]}" "$BINARY" serve \
    --webhook-addr "127.0.0.1:$WEBHOOK_PORT" --admin-addr "127.0.0.1:$ADMIN_PORT" \
    --tls-cert-file "$TMP/certs/tls.crt" --tls-key-file "$TMP/certs/tls.key" \
    --instrumentation-file "$ROOT/tests/data/instrumentations/java-load.yaml" --log-level "$LOG_LEVEL" \
    2>"$TMP/server.log" &
SERVER_PID=$!
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/server.log" >&2; exit 1; }
    sleep 0.1
done
URL="https://127.0.0.1:$WEBHOOK_PORT/mutate-v1-pod?timeout=10s"

# Each review's answer is checked once before it is measured.
for s in floor noop inject; do
    answer="$(curl -fsk -H 'Content-Type: application/json' --data-binary "@$TMP/$s.json" "$URL")"
    case "$s" in
    inject) [[ "$answer" == *'"patchType":"JSONPatch"'* ]] || { echo "[load] $s: no patch: $answer" >&2; exit 1; } ;;
    *) [[ "$answer" == *'"allowed":true'* && "$answer" != *'"patch"'* ]] || { echo "[load] $s: unexpected answer: $answer" >&2; exit 1; } ;;
    esac
done

TICK_US=$((1000000 / $(getconf CLK_TCK)))
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status"; }

# run SCENARIO SECONDS -> "requests p50_us p99_us"
run() {
    local out
    out="$("${WRK_ON[@]}" wrk -t1 -c"$CONNECTIONS" -d"$2s" --latency -s "$TMP/$1.lua" "$URL")"
    if grep -q -E "Non-2xx|Socket errors" <<<"$out"; then
        echo "[load] $1: errors:" >&2; echo "$out" >&2; exit 1
    fi
    local requests p50 p99
    requests="$(awk '/requests in/ {print $1}' <<<"$out")"
    p50="$(awk '$1 == "50%" {print $2}' <<<"$out")"
    p99="$(awk '$1 == "99%" {print $2}' <<<"$out")"
    echo "$requests $p50 $p99"
}

echo "[load] $BINARY, wrk -t1 -c$CONNECTIONS, ${DURATION}s per phase after ${WARMUP}s warm-up, $ROUNDS round(s), log level $LOG_LEVEL" >&2
if (( ${#SERVER_ON[@]} > 0 )); then
    echo "[load] server on CPU $SERVER_CPUS, wrk on CPU $WRK_CPU" >&2
else
    echo "[load] server and wrk placed by the scheduler" >&2
fi
echo "[load] RSS at rest: $(rss_kib) KiB" >&2
declare -A CPU
printf '%-6s %-7s %10s %10s %9s %9s %14s\n' round review requests req/s p50 p99 "srv CPU us/r"
for round in $(seq "$ROUNDS"); do
    for s in floor noop inject; do
        (( WARMUP > 0 )) && run "$s" "$WARMUP" >/dev/null
        before="$(cpu_ticks)"
        read -r requests p50 p99 <<<"$(run "$s" "$DURATION")"
        after="$(cpu_ticks)"
        us="$(awk -v t=$((after - before)) -v r="$requests" -v k="$TICK_US" 'BEGIN {printf "%.1f", t * k / r}')"
        CPU[$s]+="$us "
        printf '%-6s %-7s %10s %10s %9s %9s %14s\n' "$round" "$s" "$requests" \
            "$((requests / DURATION))" "$p50" "$p99" "$us"
    done
done
echo "[load] RSS after: $(rss_kib) KiB" >&2

median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
FLOOR="$(median "${CPU[floor]}")"
echo
printf '%-8s %16s %12s\n' review "srv CPU us/r" "vs floor"
for s in floor noop inject; do
    m="$(median "${CPU[$s]}")"
    printf '%-8s %16s %12s\n' "$s" "$m" "$(awk -v a="$m" -v b="$FLOOR" 'BEGIN {printf "%.2fx", a / b}')"
done

if [[ -n "$PROFILE" ]]; then
    mkdir -p "$PROFILE"
    for s in floor noop inject; do
        perf record -q -F 999 -g -p "$SERVER_PID" -o "$PROFILE/$s.data" -- sleep "$DURATION" 2>/dev/null &
        perf_pid=$!
        run "$s" "$DURATION" >/dev/null
        wait "$perf_pid" || true
        perf report -i "$PROFILE/$s.data" --no-children --sort symbol --stdio 2>/dev/null |
            grep -E '^ +[0-9]' | sed -E 's/[[:space:]]+-[[:space:]]+-[[:space:]]*$//' >"$PROFILE/$s.all" || true
        sed -n '1,40p' "$PROFILE/$s.all" >"$PROFILE/$s.txt"
        echo "[load] profile of $s: $PROFILE/$s.txt" >&2
    done
fi
