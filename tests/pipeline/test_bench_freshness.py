"""bench/bench_freshness.py still runs end to end: a broker, a publisher, a continuous ingest
and a polling reader, and it reports figures for the rows that reached the lake. No timing is
asserted: the benchmark measures, the test only checks it can."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.spark

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_freshness.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_freshness", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_rows_arrive_and_figures_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench()
    report = tmp_path / "report.json"
    argv = ["--format", "parquet", "--rate", "20", "--duration", "2", "--warmup", "0"]
    argv += ["--master", "local[1]", "--workdir", str(tmp_path / "work"), "--report", str(report)]

    assert bench.main(argv) == 0

    [result] = json.loads(report.read_text())
    assert result["format"] == "parquet"
    assert result["published"] > 0
    assert result["readable"] == result["published"]
    assert all(math.isfinite(result[k]) for k in ("median_s", "p99_s", "broker_cpu", "ingest_cpu"))
    assert result["median_s"] <= result["p99_s"] <= result["max_s"]
    out = capsys.readouterr().out
    assert "median" in out and "parquet" in out
