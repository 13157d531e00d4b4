"""Shared fixtures for the whole test suite.

`spark`: one local Spark session for the test run, created on first request (so test runs
that need no Spark never start a JVM) and stopped at the end. Tests that use it carry
``@pytest.mark.spark``. Every Spark JVM the run starts, this one and those of the jobs tests
start as subprocesses, runs with the options of `testsupport.spark_jvm` (less CPU for short
jobs).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import telemq
from testsupport import spark_jvm

_spark_conf_dir: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _spark_conf_dir
    _spark_conf_dir = spark_jvm.configure_this_process()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _spark_conf_dir is not None:
        shutil.rmtree(_spark_conf_dir, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test file runs on one pytest-xdist worker (`--dist loadgroup`, scripts/test.sh),
    so that a module's shared brokers start once, unless its tests name a group of their
    own: the Spark cluster tests share one, so that two standalone clusters never run at
    once. Runs before xdist reads the groups."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
        if item.nodeid.startswith(BUILD_INDEPENDENT):
            item.add_marker(pytest.mark.build_independent)
    _start_longest_groups_first(items)
    _skip_pure_python(items)


# Tests whose subject is code the compiled build leaves as Python (setup.py's COMPILED list):
# the filter language, the MQ command handlers, the store, the pipeline, users and ACLs, the
# dashboard, and the checks of the source itself. They run the same code in both builds, so
# the pure-Python pass of scripts/test.sh does not repeat them. Everything else (the
# protocol, subscriptions, the broker, its network, the MQ model over MQTT, hostile clients,
# the build check) drives the compiled modules and runs in both passes.
BUILD_INDEPENDENT = (
    "tests/auth/",
    "tests/commands/",
    "tests/dashboard/",
    "tests/filters/",
    "tests/pipeline/",
    "tests/sparkplug/test_payload.py",  # telemq.sparkplug, Python in both builds
    "tests/sparkplug/test_pysparkplug.py",
    "tests/store/",
    "tests/test_architecture.py",
    "tests/test_benchmarks_run.py",  # whether bench/ still runs: the same in both builds
    "tests/test_testsupport.py",
)


# How long each group took in a run of the whole suite (seconds, then the group, a line each):
# the order in which groups start. Written by a run with ``TELEMQ_RECORD_DURATIONS=FILE`` in
# its environment (an environment variable rather than an option: both passes of
# scripts/test.sh take it, and pytest reads options before it finds this file). Groups the
# run did not run keep their line.
GROUP_DURATIONS = Path(__file__).with_name("group_durations.txt")


def xdist_group_of(item: pytest.Item) -> str:
    """The group pytest-xdist gives the item: its `xdist_group` names, sorted, joined by
    ``_`` (xdist's own rule, which also suffixes each test id with ``@`` and the group)."""
    names = {str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args}
    return "_".join(sorted(names))


def recorded_durations(path: Path = GROUP_DURATIONS) -> dict[str, float]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    durations: dict[str, float] = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            seconds, group = line.split(maxsplit=1)
            durations[group] = float(seconds)
    return durations


def _start_longest_groups_first(items: list[pytest.Item]) -> None:
    """The longest groups first, so that no worker is left alone with one at the end: the
    Spark cluster groups, then the groups with other Spark tests, then the rest, each kind
    by how long it took when last recorded (`GROUP_DURATIONS`), then by its number of
    tests, most first. A group keeps its tests in their order.

    xdist hands groups out in collection order only with ``--no-loadscope-reorder``
    (scripts/test.sh); by default it orders them by their number of tests alone, which put
    the cluster groups, few tests of minutes each, at the very end, and a file with one
    test of a minute (a flapping link, a crash soak) starts last by size alone."""
    durations = recorded_durations()
    rank: dict[str, int] = {}
    size: dict[str, int] = {}
    for item in items:
        name = xdist_group_of(item)
        cluster = name.startswith("spark-cluster")
        weight = 0 if cluster else 1 if item.get_closest_marker("spark") else 2
        rank[name] = min(rank.get(name, 2), weight)
        size[name] = size.get(name, 0) + 1

    def order(item: pytest.Item) -> tuple[int, float, int]:
        name = xdist_group_of(item)
        return rank[name], -durations.get(name, 0.0), -size[name]

    items.sort(key=order)


_group_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under xdist, on the controller, which sees every worker's reports, each with its
    worker (`node`) and with its group after the test id's last ``@``."""
    if getattr(report, "node", None) is not None:
        group = report.nodeid.rpartition("@")[2]
    else:
        group = report.nodeid.split("::", 1)[0]
    _group_seconds[group] = _group_seconds.get(group, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("TELEMQ_RECORD_DURATIONS")
    if not target or hasattr(session.config, "workerinput"):  # a worker: the controller writes
        return
    path = Path(target)
    durations = {**recorded_durations(path), **_group_seconds}
    lines = [f"{seconds:.1f} {group}" for group, seconds in durations.items() if seconds >= 1]
    lines.sort(key=lambda line: -float(line.split()[0]))
    header = "# seconds group: written by TELEMQ_RECORD_DURATIONS=FILE pytest (tests/conftest.py)\n"
    path.write_text(header + "\n".join(lines) + "\n")


def _skip_pure_python(items: list[pytest.Item]) -> None:
    """Tests marked `pure_python` replace or instrument module internals, which compiled
    modules bind when they are built; they run in the pure-Python pass of scripts/test.sh."""
    if not telemq.compiled():
        return
    skip = pytest.mark.skip(reason="instruments pure-Python internals: see the pure-Python pass")
    for item in items:
        if "pure_python" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2]`` SparkSession shared by every test that asks for it (one per pytest-xdist
    worker: each is a process of its own, with its own JVM on ports the system picks)."""
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # read as the JVM starts
        session = (
            SparkSession.builder.master("local[2]")
            .appName("telemq-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
