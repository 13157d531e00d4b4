"""bench/bench_freshness.py still runs end to end: a broker, a publisher, a continuous ingest
and a polling reader, and it reports figures for the rows that reached the lake. No timing is
asserted: the benchmark measures, the test only checks it can.

The ingest runs in this process on the suite's Spark session (the benchmark's in-process
mode), so the test starts no JVM of its own; the broker is a real ``telemq serve`` process
and the publications real MQTT messages, as in the benchmark's own runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from testsupport.bench import load_bench

pytestmark = pytest.mark.spark


def test_rows_arrive_and_figures_are_reported(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("bench_freshness")
    report = tmp_path / "report.json"
    argv = ["--format", "delta", "--rate", "50", "--duration", "2", "--warmup", "0"]
    argv += ["--workdir", str(tmp_path / "work"), "--report", str(report)]

    assert bench.main(argv, spark=spark) == 0

    [result] = json.loads(report.read_text())
    assert result["format"] == "delta"
    assert result["published"] > 0
    assert result["readable"] == result["published"]
    assert result["batches"] > 0
    figures = ("median_s", "p99_s", "broker_cpu", "ingest_cpu", "mean_batch_s", "load_average")
    assert all(math.isfinite(result[k]) for k in figures)
    assert result["median_s"] <= result["p99_s"] <= result["max_s"]
    out = capsys.readouterr().out
    assert "median" in out and "delta" in out
