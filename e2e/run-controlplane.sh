#!/usr/bin/env bash
# Start a throwaway control plane (real etcd + kube-apiserver v1.37.2) on 127.0.0.1.
#
#   e2e/run-controlplane.sh                 # start, smoke test (get ns, create a Pod), tear down
#   e2e/run-controlplane.sh --hold          # start, smoke test, then wait for Ctrl-C
#   e2e/run-controlplane.sh -- CMD ARGS...  # start, run CMD with KUBECONFIG etc. set, tear down;
#                                           # exits with CMD's status
# Options:
#   --bin DIR     directory holding kube-apiserver and etcd (default: scripts/e2e-build.sh output)
#   --keep        keep the temp dir (logs, kubeconfig) after teardown
#   --no-smoke    skip the kubectl smoke test
#
# Exported to CMD: KUBECONFIG, E2E_APISERVER_URL, E2E_TOKEN, E2E_CA_FILE, E2E_TMPDIR.
# No controller-manager, scheduler or kubelet run: namespaces default/kube-system/... exist
# (the apiserver creates them), the "default" ServiceAccount does not (the ServiceAccount
# admission plugin is therefore disabled), Pods are stored but never scheduled.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="" KEEP=0 HOLD=0 SMOKE=1 CMD=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bin) BIN="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --hold) HOLD=1; shift ;;
        --no-smoke) SMOKE=0; shift ;;
        --) shift; CMD=("$@"); break ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

log() { printf '[controlplane %s] %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
now_ms() { date +%s%3N; }

if [[ -z "$BIN" ]]; then
    BIN="$("$ROOT/scripts/e2e-build.sh" | tail -n1)"
fi
for b in etcd kube-apiserver; do
    [[ -x "$BIN/$b" ]] || { log "missing $BIN/$b (run scripts/e2e-build.sh)"; exit 1; }
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/otel-injector-cp.XXXXXX")"
ETCD_PID="" APISERVER_PID=""

stop_pid() { # pid name
    local pid="$1" i
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    log "$2 did not stop in 10 s; killing"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_pid "$APISERVER_PID" kube-apiserver
    stop_pid "$ETCD_PID" etcd
    # Keep logs on failure; an interrupt (130/143) of --hold is a normal end.
    if [[ $KEEP == 1 || ( $rc -ne 0 && $rc -ne 130 && $rc -ne 143 ) ]]; then
        log "kept $TMP (logs: etcd.log, kube-apiserver.log)"
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Free TCP ports on 127.0.0.1: random in 20000-32767 (below Linux's ephemeral range),
# not currently listening and not already handed out by this script.
USED_PORTS=" $(ss -Htln 2>/dev/null | awk '{n=split($4,a,":"); print a[n]}' | tr '\n' ' ') "
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12768))
        [[ "$USED_PORTS" == *" $p "* ]] && continue
        USED_PORTS+="$p "
        echo "$p"; return
    done
}
ETCD_PORT=$(free_port) ETCD_PEER_PORT=$(free_port) API_PORT=$(free_port)

# Credentials: service-account signing key pair and a static admin token.
openssl genrsa -out "$TMP/sa.key" 2048 2>/dev/null
openssl rsa -in "$TMP/sa.key" -pubout -out "$TMP/sa.pub" 2>/dev/null
TOKEN="$(openssl rand -hex 16)"
echo "$TOKEN,admin,admin,system:masters" > "$TMP/tokens.csv"

T0=$(now_ms)
log "etcd on 127.0.0.1:$ETCD_PORT ($BIN/etcd)"
"$BIN/etcd" \
    --name default \
    --data-dir "$TMP/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync \
    --log-level warn \
    > "$TMP/etcd.log" 2>&1 &
ETCD_PID=$!

log "kube-apiserver on https://127.0.0.1:$API_PORT"
mkdir -p "$TMP/certs"
"$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --cert-dir "$TMP/certs" \
    --secure-port "$API_PORT" \
    --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 \
    --endpoint-reconciler-type none \
    --service-cluster-ip-range 10.0.0.0/24 \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$TMP/sa.pub" \
    --service-account-signing-key-file "$TMP/sa.key" \
    --token-auth-file "$TMP/tokens.csv" \
    --authorization-mode RBAC \
    --disable-admission-plugins ServiceAccount \
    --allow-privileged=true \
    > "$TMP/kube-apiserver.log" 2>&1 &
APISERVER_PID=$!

CA="$TMP/certs/apiserver.crt"
URL="https://127.0.0.1:$API_PORT"
deadline=$((SECONDS + ${E2E_READY_TIMEOUT:-120}))
until [[ -s "$CA" ]] && curl -fsS --cacert "$CA" -H "Authorization: Bearer $TOKEN" "$URL/readyz" >/dev/null 2>&1; do
    for p in "$ETCD_PID:etcd" "$APISERVER_PID:kube-apiserver"; do
        if ! kill -0 "${p%%:*}" 2>/dev/null; then
            log "${p#*:} exited early; last log lines:"; tail -n 30 "$TMP/${p#*:}.log" >&2; exit 1
        fi
    done
    if (( SECONDS > deadline )); then
        log "not ready in time; /readyz?verbose says:"
        curl -sS --cacert "$CA" -H "Authorization: Bearer $TOKEN" "$URL/readyz?verbose" >&2 || true
        exit 1
    fi
    sleep 0.2
done
READY_MS=$(( $(now_ms) - T0 ))
log "ready after ${READY_MS} ms"

KUBECONFIG_FILE="$TMP/kubeconfig"
cat > "$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $URL
    certificate-authority: $CA
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
chmod 600 "$KUBECONFIG_FILE"
log "kubeconfig: $KUBECONFIG_FILE"
echo "KUBECONFIG=$KUBECONFIG_FILE"

rss() { awk '/VmRSS/ {printf "%d MiB", $2/1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

if [[ $SMOKE == 1 ]]; then
    k() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }
    k get ns
    if k -n default get serviceaccount default >/dev/null 2>&1; then
        log "ServiceAccount default/default exists"
    else
        log "ServiceAccount default/default does not exist (no controller-manager)"
    fi
    cat <<'EOF' | k create -f -
apiVersion: v1
kind: Pod
metadata:
  name: smoke
  namespace: default
spec:
  containers:
  - name: app
    image: registry.example/app:1
EOF
    k -n default get pod smoke -o wide
    log "memory: etcd $(rss "$ETCD_PID"), kube-apiserver $(rss "$APISERVER_PID")"
fi

if [[ ${#CMD[@]} -gt 0 ]]; then
    export KUBECONFIG="$KUBECONFIG_FILE" E2E_APISERVER_URL="$URL" E2E_TOKEN="$TOKEN" E2E_CA_FILE="$CA" E2E_TMPDIR="$TMP"
    log "running: ${CMD[*]}"
    set +e
    "${CMD[@]}"
    rc=$?
    set -e
    exit "$rc"
fi

if [[ $HOLD == 1 ]]; then
    log "holding; Ctrl-C to tear down"
    while kill -0 "$APISERVER_PID" 2>/dev/null && kill -0 "$ETCD_PID" 2>/dev/null; do sleep 1; done
    log "a component exited"; exit 1
fi
log "tearing down"
