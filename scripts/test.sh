#!/usr/bin/env bash
# Every test, as CI runs them: installs telemq and the test tools (scripts/bootstrap.sh), runs
# the whole suite against the installed, compiled build, then every test but the Spark ones
# against the source. Arguments go to pytest (after ours: `-n 0` runs in one process).
#
# Each pass runs on two pytest-xdist workers (one per core of the machines it is measured on,
# fewer on a single core), each test file on one worker (`--dist loadgroup`, a group per file
# made in tests/conftest.py: a module's shared brokers start once; the Spark cluster tests
# share one group, so two standalone clusters never run at once). Workers share nothing:
# each has its own temporary directories, Spark session and slice of ports
# (tests/testsupport/process.py, `free_port`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --test
cores=$(nproc 2>/dev/null || echo 1)
workers=$((cores < 2 ? cores : 2))
parallel=(-n "$workers" --dist loadgroup)
echo "== the compiled build" >&2
# --durations: the slowest tests at the end of each pass, to keep the whole run short
# (30 minutes with the install on 2 cores in November 2026: the compiled pass 18, the
# pure-Python pass 10; the Spark tests are most of the compiled pass's time).
TELEMQ_EXPECT_BUILD=compiled python3 -m pytest "${parallel[@]}" --durations=15 "$@"
echo "== pure Python, from the source" >&2
# The source as pure Python is what an install without a C compiler runs: every test again
# but the Spark ones. The pipeline is not compiled, so the Spark tests would only repeat the
# first pass (their brokers are in-process threads or subprocesses of the same code, already
# tested here by the broker tests). PYTHONPATH is absolute so that the brokers the tests start
# in their own directories run the source too.
TELEMQ_EXPECT_BUILD=pure PYTHONPATH="$PWD/src" \
    python3 -m pytest "${parallel[@]}" --durations=15 -m "not spark" "$@"
