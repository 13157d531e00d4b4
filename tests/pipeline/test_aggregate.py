"""`telemq pipeline aggregate`: the numbers against a direct computation in Python."""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from telemq.cli.main import main
from telemq.client import MqttClient
from telemq.pipeline.aggregate import parse_window, run_aggregate
from telemq.pipeline.ingest import run_ingest

from .helpers import Pub, append_journal, drain

pytestmark = pytest.mark.spark


def payloads(i: int) -> bytes:
    """Numbers mostly; also strings, booleans, nulls, objects, bad JSON, other fields."""
    kind = i % 9
    if kind == 0:
        return json.dumps({"temp": str(20 + i % 15)}).encode()  # a string: not a number
    if kind == 1:
        return json.dumps({"temp": True, "hum": 50}).encode()
    if kind == 2:
        return b"{broken"
    if kind == 3:
        return json.dumps({"hum": 40 + i % 7, "site": {"x": 1}}).encode()
    if kind == 4:
        return json.dumps({"temp": None, "hum": 1e3}).encode()
    return json.dumps({"temp": round(15 + (i * 7.3) % 20, 2), "hum": 30 + i % 50}).encode()


def expected_windows(pubs: list[Pub], ts: list[int], width_s: int) -> dict[Any, dict[str, Any]]:
    """Per (topic, window start in seconds): count, and per field count/min/max/avg."""
    groups: dict[Any, list[Any]] = defaultdict(list)
    for pub, t in zip(pubs, ts, strict=True):
        start = (t // 1_000_000) // width_s * width_s
        try:
            doc = json.loads(pub.payload)
        except ValueError:
            doc = None
        groups[(pub.topic, start)].append(doc)
    out = {}
    for key, docs in groups.items():
        entry: dict[str, Any] = {"count": len(docs)}
        for f in ("hum", "temp"):
            values = [
                float(d[f])
                for d in docs
                if isinstance(d, dict)
                and isinstance(d.get(f), int | float)
                and not isinstance(d.get(f), bool)
            ]
            entry[f] = (
                (len(values), min(values), max(values), sum(values) / len(values))
                if values
                else (0, None, None, None)
            )
        out[key] = entry
    return out


@pytest.fixture
def driver_in_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Python driver in a time zone that is not UTC: published window times must still
    be UTC (collected timestamps become naive local datetimes)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _utc_text(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def test_aggregates_match_a_direct_computation(
    spark: Any, tmp_path: Path, broker: Any, driver_in_new_york: None
) -> None:
    _, port, _ = broker
    data, lake = tmp_path / "data", tmp_path / "lake"
    pubs = [Pub(f"plant/{'ab'[i % 2]}", payloads(i)) for i in range(120)]
    records = append_journal(data, pubs, ts_step_us=3_100_000)  # about 6 minutes
    run_ingest(spark, data, lake)
    result = run_aggregate(spark, lake, "1m", publish_to=("127.0.0.1", port), topic_prefix="agg")
    assert result.fields == ["hum", "temp"]  # found: numeric somewhere; "site" never is
    expected = expected_windows(pubs, [r.ts_us for r in records], 60)
    rows = spark.read.parquet(str(result.table)).collect()
    assert result.rows == len(rows) == len(expected)
    assert result.input_rows == 120
    for row in rows:
        start = int(row["window_start"].timestamp())  # naive values are in local time
        want = expected[(row["topic"], start)]
        assert row["count"] == want["count"]
        for f in ("hum", "temp"):
            count, low, high, avg = want[f]
            assert row[f"{f}_count"] == count
            assert row[f"{f}_min"] == low and row[f"{f}_max"] == high
            assert (avg is None and row[f"{f}_avg"] is None) or math.isclose(
                row[f"{f}_avg"], avg, rel_tol=1e-9
            )
    # The latest window of each topic is retained on the broker under the prefix.
    with MqttClient("127.0.0.1", port, "agg-reader") as reader:
        reader.subscribe([("agg/#", 1)])
        retained = {m.topic: json.loads(m.payload) for m in drain(reader, 1.0)}
    assert set(retained) == {"agg/plant/a", "agg/plant/b"}
    for topic, doc in retained.items():
        last = max(k[1] for k in expected if k[0] == doc["topic"])
        want = expected[(doc["topic"], last)]
        assert topic == f"agg/{doc['topic']}" and doc["count"] == want["count"]
        assert (doc["window_start"], doc["window_end"]) == (_utc_text(last), _utc_text(last + 60))
        assert doc["fields"]["temp"]["count"] == want["temp"][0]
    assert result.published == 2

    # The CLI: explicit fields and another window.
    code = main(
        ["pipeline", "aggregate", "-l", str(lake), "--window", "2m", "--fields", "temp", "-q"]
    )
    assert code == 0
    two = spark.read.parquet(str(lake / "aggregates" / "2m"))
    assert "hum_avg" not in two.columns
    assert two.groupBy().sum("count").first()[0] == 120


def test_window_parsing() -> None:
    assert parse_window("1m") == ("1 minute", "1m")
    assert parse_window("30s") == ("30 seconds", "30s")
    assert parse_window("2h") == ("2 hours", "2h")
    with pytest.raises(ValueError, match="window"):
        parse_window("1 fortnight")
