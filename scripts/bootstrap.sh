#!/usr/bin/env bash
# Installs what telemq needs on a fresh Debian machine, idempotently.
#   bash scripts/bootstrap.sh          the broker, uvloop, PySpark and Java 17+ (for the demo),
#                                      and the web dashboard's browser libraries (npm ci)
#   bash scripts/bootstrap.sh --test   plus test tools, Debian's MQTT clients, Chromium,
#                                      PostgreSQL and HAProxy (the tests start their own)
# Both install the `postgres` extra (psycopg), for `[store] kind = "postgres"`, and the `lake`
# extra (deltalake, pyiceberg), for the pipeline's Delta and Iceberg tables.
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
    # The load balancer in front of an [ha] group (tests/store/test_ha_clients.py).
    command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
    # Headless, for the dashboard test (tests/dashboard, driven by playwright-core).
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    # venv with pip, for the Sparkplug peers' environment (.venv-sparkplug, below).
    "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
    # initdb and pg_ctl, for the PostgreSQL store's tests (tests/testsupport/postgres.py):
    # Debian puts them in /usr/lib/postgresql/<version>/bin, not on the PATH.
    if ! command -v initdb >/dev/null 2>&1 &&
        ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
        missing+=(postgresql)
    fi
fi
# Node and npm: npm ci installs the dashboard's browser libraries (and, with --test, the
# test tools under tests/) from the committed lock files.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
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
# npm ci in $1, exactly as its package-lock.json pins, unless node_modules was installed
# from these very files: the stamp, which npm ci deletes with the rest of node_modules,
# holds their hash.
npm_ci() {
    local dir=$1 what=$2 stamp hash
    stamp=$dir/node_modules/.telemq-npm-ci.sha256
    hash=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
        echo "bootstrap: installing $what (npm ci in $dir)" >&2
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
        echo "$hash" >"$stamp"
    fi
}
# The dashboard's Chart.js and MQTT.js, served from node_modules (src/telemq/dashboard):
# before pip, whose build packages them.
npm_ci src/telemq/dashboard "the dashboard's Chart.js and MQTT.js"
# The test tools below come from the network and the disk, telemq's build (pip, below) from
# the compiler on one core: they run at the same time, and the script waits for them all.
helpers=()
if [ "$want_test" = 1 ]; then
    # MQTT.js for the interop tests (tests/testsupport/node.py).
    npm_ci tests/interop/node "MQTT.js for the interop tests" &
    helpers+=($!)
    # playwright-core, which drives Debian's Chromium in the dashboard test (no browser download).
    npm_ci tests/dashboard "playwright-core for the dashboard test" &
    helpers+=($!)
    # The Sparkplug edge nodes and host applications of tests/sparkplug: pysparkplug needs
    # paho-mqtt < 2, the test suite paho-mqtt 2, so it has a virtual environment of its own.
    (
        [ -x .venv-sparkplug/bin/python ] || "$PYTHON" -m venv .venv-sparkplug
        .venv-sparkplug/bin/python -c \
            'import importlib.metadata as m; assert m.version("pysparkplug") == "0.6.1"' \
            2>/dev/null ||
            .venv-sparkplug/bin/python -m pip install -q --disable-pip-version-check \
                "pysparkplug==0.6.1"
    ) &
    helpers+=($!)
fi
if [ "$want_test" = 1 ]; then
    "$PYTHON" -m pip install -q --disable-pip-version-check ".[test,fast,spark,postgres,lake]"
else
    "$PYTHON" -m pip install -q --disable-pip-version-check ".[fast,spark,postgres,lake]"
fi
for helper in "${helpers[@]}"; do
    wait "$helper" # its exit status: a failed one stops the script (set -e)
done
"$PYTHON" -m telemq --version
