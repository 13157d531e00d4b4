"""Shared fixtures for the whole test suite.

`spark`: one local Spark session for the test run, created on first request (so test runs
that need no Spark never start a JVM) and stopped at the end. Tests that use it carry
``@pytest.mark.spark``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import telemq


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test file runs on one pytest-xdist worker (`--dist loadgroup`, scripts/test.sh),
    so that a module's shared brokers start once, unless its tests name a group of their
    own: the Spark cluster tests share one, so that two standalone clusters never run at
    once. Runs before xdist reads the groups."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    _skip_pure_python(items)


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
