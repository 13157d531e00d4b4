#!/usr/bin/env bash
# Installs what telemq needs on a fresh Debian machine, idempotently.
#   bash scripts/bootstrap.sh          the broker, uvloop, PySpark and Java 17+ (for the demo)
#   bash scripts/bootstrap.sh --test   plus test tools and Debian's MQTT clients
# telemq is installed from this checkout with its per-message modules compiled by mypyc
# (setup.py), which needs a C compiler and Python's headers: installed here when missing.
# Edits to src/ take effect after running this again (or run from source: PYTHONPATH=src).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1
PYTHON=${PYTHON:-python3}

apt_install() {
    if command -v apt-get >/dev/null 2>&1; then
        if [ "$(id -u)" = "0" ]; then
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
        else
            sudo apt-get update -qq
            sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
        fi
    else
        echo "bootstrap: please install $* with your system's package manager" >&2
        return 1
    fi
}

java_major() {
    command -v java >/dev/null 2>&1 || { echo 0; return; }
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1
}

missing=()
if [ "$want_test" = 1 ]; then
    command -v mosquitto_sub >/dev/null 2>&1 || missing+=(mosquitto-clients)
    # The broker itself, for the bridge tests (Debian installs it in /usr/sbin).
    command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
python_h=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h
[ -f "$python_h" ] || missing+=(python3-dev)
major=$(java_major)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    missing+=(openjdk-17-jre-headless)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}" >&2
    apt_install "${missing[@]}"
fi
major=$(java_major)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    echo "bootstrap: Java 17 or newer is required by PySpark (found: ${major:-none});" \
         "install a JRE 17+ and put 'java' on the PATH" >&2
    exit 1
fi
if [ "$want_test" = 1 ]; then
    # MQTT.js for the interop tests (tests/testsupport/node.py), exactly as package-lock.json
    # pins it; skipped when node_modules was installed from these very files (the stamp, which
    # npm ci deletes with the rest of node_modules, holds their hash).
    node_dir=tests/interop/node
    node_stamp=$node_dir/node_modules/.telemq-npm-ci.sha256
    node_hash=$(cat "$node_dir/package.json" "$node_dir/package-lock.json" | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$node_stamp" 2>/dev/null)" != "$node_hash" ]; then
        echo "bootstrap: installing MQTT.js (npm ci in $node_dir)" >&2
        (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
        echo "$node_hash" >"$node_stamp"
    fi
fi
if [ "$want_test" = 1 ]; then
    "$PYTHON" -m pip install -q --disable-pip-version-check ".[test,fast,spark]"
else
    "$PYTHON" -m pip install -q --disable-pip-version-check ".[fast,spark]"
fi
"$PYTHON" -m telemq --version
