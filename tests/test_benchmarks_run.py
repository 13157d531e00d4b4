"""The in-process benchmarks of bench/ still run, as users run them, on tiny sizes: a
benchmark the code moved away from fails here instead of in a user's hands. No figure is
checked (the benchmarks measure; docs/performance.md holds what they measured). The ones
that start brokers, Spark or a load generator have smoke tests of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.bench import BENCH


@pytest.mark.parametrize(
    ("script", "arguments"),
    [
        ("bench_connection.py", ["--messages", "300"]),
        ("bench_filters.py", ["--seconds", "0.05"]),
        ("bench_fsync.py", ["--count", "20"]),
        ("bench_filter_budget.py", ["--users", "1", "--payload", "200", "--publications", "5"]),
        ("bench_retained.py", ["--retained", "200", "--filters", "5"]),
        ("bench_routing.py", ["--subscriptions", "20", "--seconds", "0.05"]),
        ("bench_sparkplug.py", ["--messages", "50", "--metrics", "4"]),
    ],
)
def test_the_benchmark_runs(script: str, arguments: list[str], tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH / script), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ),
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.strip(), run.stderr[-3000:]
