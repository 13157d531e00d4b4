#!/usr/bin/env bash
# Every test, as CI runs them: installs telemq and the test tools (scripts/bootstrap.sh), runs
# the whole suite against the installed, compiled build, then every test but the Spark ones
# against the source. Arguments go to pytest (after ours: `-n 0` runs in one process).
#
# Each pass runs on two pytest-xdist workers per core: the tests spend much of their time
# waiting on brokers, Spark and sockets (one worker per core kept the cores 40% busy); three
# per core made the compiled pass slower (922 s against 839 s: the Spark tests, which start
# first, then fight for the two cores). Each
# test file runs on one worker (`--dist loadgroup`, a group per file made in
# tests/conftest.py: a module's shared brokers start once; the Spark cluster tests have
# groups of their own). The longest groups start first, in the order tests/conftest.py sorts
# them by the seconds tests/group_durations.txt recorded (`--no-loadscope-reorder`: xdist
# would otherwise order them by their number of tests, and the cluster tests, few and long,
# would start last; a long test alone in its file, too). After adding or slowing down a
# long test, record the durations again:
# `TELEMQ_RECORD_DURATIONS=tests/group_durations.txt bash scripts/test.sh`. Workers share
# nothing: each has its own temporary directories, Spark session and slice of ports
# (tests/testsupport/process.py, `free_port`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --test
cores=$(nproc 2>/dev/null || echo 1)
workers=$((2 * cores))
parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
echo "== the compiled build" >&2
# --durations: the slowest tests at the end of each pass, to keep the whole run short
# (about 17.5 minutes with the install on 2 cores at the end of November 2026: the install
# about 2.5, the compiled pass 11, the pure-Python pass 4; the Spark cluster tests, in two
# groups, are the compiled pass's longest; every Spark JVM runs with the options of
# tests/testsupport/spark_jvm.py, which cut the Spark tests' CPU by a third).
TELEMQ_EXPECT_BUILD=compiled python3 -m pytest "${parallel[@]}" --durations=15 "$@"
echo "== pure Python, from the source" >&2
# The source as pure Python is what an install without a C compiler runs: the tests of what
# the compiled build changes (setup.py's COMPILED list: the protocol, subscriptions, the
# broker's core and peers) run again. Not repeated: tests marked build_independent
# (tests/conftest.py: the filter language, MQ command handlers, store, pipeline, users and
# ACLs, dashboard, source checks), whose subject is Python in both builds, and the Spark
# tests, whose brokers run the same compiled modules the broker tests already cover.
# PYTHONPATH is absolute so that the brokers the tests start in their own directories run
# the source too.
TELEMQ_EXPECT_BUILD=pure PYTHONPATH="$PWD/src" \
    python3 -m pytest "${parallel[@]}" --durations=15 -m "not spark and not build_independent" "$@"
