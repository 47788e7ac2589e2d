#!/usr/bin/env bash
# Build the end-to-end tests' container "images" as directories: each directory is an image's
# root filesystem (the pod runner, e2e/support/runner.rs, binds its top-level entries at `/`
# inside bubblewrap, over the host's /usr and /etc). Agent images are laid out like the
# OpenTelemetry Operator's autoinstrumentation images, from the registries this machine
# reaches; app images hold the test apps of e2e/apps/.
#
#   scripts/e2e-images.sh          # builds what is missing; prints `NAME=DIR` per image
#   scripts/e2e-images.sh NAME...  # the same for the named images only
#
# | image          | root holds                         | from                                          |
# | java-agent     | /javaagent.jar                     | Maven Central, opentelemetry-javaagent 2.20.1 |
# | java-agent-declarative | /javaagent.jar             | Maven Central, opentelemetry-javaagent 2.33.1 (reads OTEL_CONFIG_FILE) |
# | nodejs-agent   | /autoinstrumentation/ (+ node_modules) | npm ci of e2e/images/nodejs-agent (locked) |
# | python-agent   | /autoinstrumentation/              | pip install --target of e2e/images/python-agent/requirements.txt (with the SDK file-configuration extra) |
# | java-app       | /app/App.class                     | javac of e2e/apps/java/App.java              |
# | nodejs-app     | /app/server.js                     | e2e/apps/nodejs/                              |
# | python-app     | /app/app.py, /app/lib/ (Flask)     | e2e/apps/python/ + pip install --target       |
# | python-sdk-app | /app/app.py, /app/lib/ (SDK)       | e2e/apps/python-sdk/ + pip install --target   |
#
# Cache: ${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}/images/NAME/HASH/
# where HASH covers the image's inputs (and this script). Progress goes to stderr.
# bubblewrap (Debian's `bubblewrap`) is installed here too when `bwrap` is missing: the pod
# runner needs it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${OTEL_INJECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-injector}"
JAVA_AGENT_VERSION="2.20.1"
# The newest agent Maven Central serves; it reads a declarative configuration file (schema 1.x)
# from OTEL_CONFIG_FILE (stable since 2.26.0).
JAVA_AGENT_DECLARATIVE_VERSION="2.33.1"
PYTHON="${E2E_PYTHON:-python3}"   # builds cp311 wheels for the apps' /usr/bin/python3 (3.11)

ONLY=("$@")   # image names to build; none: all
log() { printf '[e2e-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v bwrap >/dev/null; then
    mkdir -p "$CACHE_ROOT/logs"
    apt_log="$CACHE_ROOT/logs/bubblewrap.log"
    log "installing bubblewrap (Debian package; full output: $apt_log)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } >"$apt_log" 2>&1 \
        || { cat "$apt_log" >&2; exit 1; }
fi

# The Python images hold compiled wheels for the interpreter that builds them; the pod runner
# runs the apps with the machine's /usr/bin/python3. They must be the same minor version.
py_minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
if [[ "$(py_minor "$PYTHON")" != "$(py_minor /usr/bin/python3)" ]]; then
    log "$PYTHON is Python $(py_minor "$PYTHON"), /usr/bin/python3 is $(py_minor /usr/bin/python3): set E2E_PYTHON to a pip of the latter's version"
    exit 1
fi

hash_of() { # files... -> 16 hex digits
    cat "$@" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16
}

pip_target() { # requirements target: every package pinned there, no resolver, wheels only
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --root-user-action=ignore --no-deps --only-binary=:all: -r "$1" --target "$2" >&2
}

# image NAME HASH BUILD_FUNCTION [ARGS...]: runs BUILD_FUNCTION TEMP_DIR ARGS... into a temp dir,
# renamed into place when complete.
BUILT=()
image() {
    local name="$1" hash="$2" fn="$3"
    local out="$CACHE_ROOT/images/$name/$hash"
    if ((${#ONLY[@]})) && [[ " ${ONLY[*]} " != *" $name "* ]]; then return 0; fi
    BUILT+=("$name")
    if [[ ! -f "$out/.complete" ]]; then
        mkdir -p "$CACHE_ROOT/images/$name"
        exec 8>"$CACHE_ROOT/images/$name/.lock"
        flock 8
        if [[ ! -f "$out/.complete" ]]; then
            local tmp t0=$SECONDS
            tmp="$(mktemp -d "$CACHE_ROOT/images/$name/.tmp.XXXXXX")"
            log "building $name into $out"
            "$fn" "$tmp" "${@:4}"
            touch "$tmp/.complete"
            rm -rf "$out"
            mv "$tmp" "$out"
            log "$name built in $((SECONDS - t0)) s"
        fi
        exec 8>&-
    fi
    echo "$name=$out"
}

build_java_agent() { # DIR VERSION
    local m2 version="$2"
    m2="$(mktemp -d)"
    mvn -q -B dependency:copy \
        -Dartifact="io.opentelemetry.javaagent:opentelemetry-javaagent:$version" \
        -DoutputDirectory="$m2" >&2
    mv "$m2/opentelemetry-javaagent-$version.jar" "$1/javaagent.jar"
    rm -rf "$m2"
}

build_nodejs_agent() {
    local src="$ROOT/e2e/images/nodejs-agent"
    mkdir -p "$1/autoinstrumentation"
    cp "$src/package.json" "$src/package-lock.json" "$src/autoinstrumentation.js" "$1/autoinstrumentation/"
    (cd "$1/autoinstrumentation" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --no-progress --loglevel=error >&2)
}

build_python_agent() {
    pip_target "$ROOT/e2e/images/python-agent/requirements.txt" "$1/autoinstrumentation"
}

build_java_app() {
    mkdir -p "$1/app"
    javac --release 17 -d "$1/app" "$ROOT/e2e/apps/java/App.java" >&2
}

build_nodejs_app() {
    mkdir -p "$1/app"
    cp "$ROOT/e2e/apps/nodejs/server.js" "$1/app/"
}

build_python_app() {
    mkdir -p "$1/app"
    cp "$ROOT/e2e/apps/python/app.py" "$1/app/"
    pip_target "$ROOT/e2e/apps/python/requirements.txt" "$1/app/lib"
}

build_python_sdk_app() {
    mkdir -p "$1/app"
    cp "$ROOT/e2e/apps/python-sdk/app.py" "$1/app/"
    pip_target "$ROOT/e2e/apps/python-sdk/requirements.txt" "$1/app/lib"
}

E="$ROOT/e2e"
image java-agent "$(echo "$JAVA_AGENT_VERSION" | hash_of /dev/stdin)" build_java_agent "$JAVA_AGENT_VERSION"
image java-agent-declarative "$(echo "$JAVA_AGENT_DECLARATIVE_VERSION" | hash_of /dev/stdin)" build_java_agent "$JAVA_AGENT_DECLARATIVE_VERSION"
image nodejs-agent "$(hash_of "$E/images/nodejs-agent/package.json" "$E/images/nodejs-agent/package-lock.json" "$E/images/nodejs-agent/autoinstrumentation.js")" build_nodejs_agent
image python-agent "$(hash_of "$E/images/python-agent/requirements.txt")" build_python_agent
image java-app "$(hash_of "$E/apps/java/App.java")" build_java_app
image nodejs-app "$(hash_of "$E/apps/nodejs/server.js")" build_nodejs_app
image python-app "$(hash_of "$E/apps/python/app.py" "$E/apps/python/requirements.txt")" build_python_app
image python-sdk-app "$(hash_of "$E/apps/python-sdk/app.py" "$E/apps/python-sdk/requirements.txt")" build_python_sdk_app

for name in "${ONLY[@]}"; do
    [[ " ${BUILT[*]} " == *" $name "* ]] || { log "no image named $name"; exit 1; }
done
