"""bench/bench_sparkplug.py ``--source`` still runs: it writes a Sparkplug journal, reads
it through ``format("telemq")`` with ``sparkplug=metrics`` and reports figures. No timing
is asserted: the benchmark measures, the test checks that what it times decodes every
metric (the aggregate it reads sums the value columns)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from testsupport.bench import load_bench

pytestmark = pytest.mark.spark


def test_the_source_benchmark_reads_every_metric(spark: Any, tmp_path: Path) -> None:
    bench = load_bench("bench_sparkplug")
    messages, metrics = 30, 4  # Float, Int32, Boolean, String, each once per message
    birth, data = bench.payloads(messages, metrics)
    where = bench.write_journal(tmp_path / "data", birth, data)
    expected = (messages + 1) * metrics  # the NBIRTH's metrics too

    [read] = bench.source_run(spark, where, expected, repeats=1)

    assert read.metrics == expected
    assert read.wall_s > 0 and read.cpu.total > 0
    assert math.isfinite(read.per_wall) and math.isfinite(read.per_cpu)
    count, row = bench.read_metrics(spark, where)
    each = messages + 1
    assert count == expected
    assert row["sum(double_value)"] == pytest.approx(1.5 * each)
    assert row["sum(int_value)"] == 42 * each
    assert row["count(boolean_value)"] == row["count(string_value)"] == each
    assert "median" in bench.summary([read])
