#!/usr/bin/env bash
# Every test, as CI runs them: installs telemq and the test tools (scripts/bootstrap.sh), runs
# the whole suite against the installed, compiled build, then every test but the Spark ones
# against the source (pure Python: what an install without a C compiler runs; the pipeline
# is not compiled, so its Spark tests would only repeat themselves; PYTHONPATH is absolute so
# that the brokers the tests start in their own directories run the source too). Arguments go
# to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --test
echo "== the compiled build" >&2
# --durations: the slowest tests at the end of each pass, to keep the whole run in its
# 40 minutes (about 36 with the install in November 2026).
TELEMQ_EXPECT_BUILD=compiled python3 -m pytest --durations=15 "$@"
echo "== pure Python, from the source" >&2
TELEMQ_EXPECT_BUILD=pure PYTHONPATH="$PWD/src" python3 -m pytest --durations=15 -m "not spark" "$@"
