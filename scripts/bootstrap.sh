#!/usr/bin/env bash
# Installs what telemq needs on a fresh Debian machine, idempotently.
#   bash scripts/bootstrap.sh          the broker (and uvloop)
#   bash scripts/bootstrap.sh --test   plus test tools, MQTT clients and Java for Spark
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

if [ "$want_test" = 1 ]; then
    missing=()
    command -v mosquitto_sub >/dev/null 2>&1 || missing+=(mosquitto-clients)
    if [ "$(java_major)" -lt 17 ] 2>/dev/null || [ -z "$(java_major)" ]; then
        missing+=(openjdk-17-jre-headless)
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "bootstrap: installing ${missing[*]}" >&2
        apt_install "${missing[@]}"
    fi
    if [ "$(java_major)" -lt 17 ] 2>/dev/null; then
        echo "bootstrap: Java 17 or newer is required for the Spark tests (found: $(java_major))" >&2
        exit 1
    fi
    "$PYTHON" -m pip install -q --disable-pip-version-check -e ".[test,fast]"
else
    "$PYTHON" -m pip install -q --disable-pip-version-check -e ".[fast]"
fi
