"""The `telemq` data source on a real local Spark: batch and stream reads, the filter option."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from telemq.filters import compile_filter
from telemq.pipeline.source import SeqRange, SourceOptions, read_journal, register
from telemq.store import SqliteStore, consumers

from .helpers import Pub, append_journal, frame_rows, journal_rows, run_stream, telemetry

pytestmark = pytest.mark.spark


def test_batch_read_equals_the_journal_in_parallel_partitions(spark: Any, tmp_path: Path) -> None:
    records = append_journal(tmp_path, telemetry(1200))
    frame = read_journal(spark, str(tmp_path), options={"rowsPerPartition": 300})
    assert frame.rdd.getNumPartitions() == 4
    assert frame_rows(frame.collect()) == journal_rows(records)
    assert [f.name for f in frame.schema.fields] == [
        "seq",
        "ts",
        "topic",
        "sub_point",
        "qos",
        "retain",
        "payload",
        "client_id",
        "user_id",
        "content_type",
        "user_properties",
        "broker",
    ]
    assert {r["content_type"] for r in frame.select("content_type").collect()} == {None}
    # The origin broker; NULL for rows written before the journal had one.
    assert {r["broker"] for r in frame.select("broker").collect()} == {"telemq", "edge-1", None}
    # The plain format, a seq range, topics (comma list), and a replayed range: same rows.
    ranged = (
        spark.read.format("telemq")
        .option("path", str(tmp_path))
        .option("startingSeq", 101)
        .option("endingSeq", 250)
        .option("topics", "sensors/room1/+,sensors/room2/#")
        .load()
    )
    expected = [
        r for r in journal_rows(records[100:250]) if r[2].split("/")[1] in ("room1", "room2")
    ]
    assert frame_rows(ranged.collect()) == expected
    assert frame_rows(ranged.collect()) == expected


def test_partition_read_is_deterministic_without_spark(tmp_path: Path) -> None:
    append_journal(tmp_path, telemetry(500))
    options = SourceOptions.parse({"path": str(tmp_path), "topics": "sensors/room0/#"})
    first = [b.to_pylist() for b in options.read(SeqRange(50, 420))]
    again = [b.to_pylist() for b in options.read(SeqRange(50, 420))]
    room0 = [s for s in range(50, 421) if (s - 1) % 5 == 0]  # telemetry() cycles 5 topics
    assert first == again
    assert [row["seq"] for batch in first for row in batch] == room0


def test_filter_option_equals_the_python_evaluator(spark: Any, tmp_path: Path) -> None:
    pubs = [
        *telemetry(600),
        Pub("x", json.dumps({"temp": 31, "site": {"name": "lab"}, "r": [1, 2]}).encode()),
        Pub("x", json.dumps({"temp": "31"}).encode()),
        Pub("x", json.dumps({"temp": None}).encode()),
        Pub("x", b"[1, 2]"),
        Pub("x", b'{"temp": 40} trailing'),
        Pub("x", json.dumps({"temp": 35.5, "ok": True}).encode()),
    ]
    records = append_journal(tmp_path, pubs)
    filters = [
        "temp > 30",
        "temp > 30 AND ok = TRUE",
        "temp BETWEEN 20 AND 25 OR hum IN (21, 22, 23)",
        "site.name LIKE 'l_b' OR r[1] = 2",
        "temp IS NULL",
        "NOT (temp <= 30) AND Properties.QoS > 0 AND Properties.ClientId <> 'dev1'",
        "Properties.Topic LIKE 'sensors/room_/%' AND Properties.Retain = TRUE",
        "temp / 0 IS NULL AND hum % 7 = 3",
    ]
    for text in filters:
        flt = compile_filter(text)
        expected = [
            r
            for r in journal_rows(records)
            if flt.evaluate(
                r[6],
                {
                    "Topic": r[2],
                    "QoS": r[4],
                    "Retain": r[5],
                    "ClientId": r[7],
                    "UserId": r[8],
                    "SubPoint": r[3],
                },
            )
            is True
        ]
        native = read_journal(spark, str(tmp_path), filter=text)  # a Spark Column
        in_reader = spark.read.format("telemq").options(path=str(tmp_path), filter=text).load()
        assert frame_rows(native.collect()) == expected, text
        assert frame_rows(in_reader.collect()) == expected, text


def _consumer_after_stop(data: Path, name: str) -> consumers.ConsumerRecord:
    """The consumer record of `name` once its query is over (Spark ends the process running
    the source's offset methods asynchronously after the query stops)."""
    deadline = time.monotonic() + 60
    while True:
        found = {r.consumer: r for r in consumers.read_records(data)}.get(name)
        if (found is not None and not consumers.is_live(found)) or time.monotonic() > deadline:
            assert found is not None and not consumers.is_live(found), found
            return found
        time.sleep(0.2)


def test_stream_read_and_restart_from_checkpoint(spark: Any, tmp_path: Path) -> None:
    data, checkpoint = tmp_path / "data", tmp_path / "ckpt"
    records = append_journal(data, telemetry(700))
    first = run_stream(spark, data, checkpoint, maxRowsPerBatch=200, consumer="t1")
    assert len(first) == 4  # 700 rows in batches of at most 200
    assert frame_rows(r for rows in first.values() for r in rows) == journal_rows(records)
    # The source learns of a batch's end one batch late: the record never runs ahead.
    record = _consumer_after_stop(data, "t1")
    assert record.committed_seq is not None and 0 < record.committed_seq <= 700
    assert consumers.retention_floor(data) is None  # a query that ended holds nothing back

    more = append_journal(data, telemetry(250, seed=2))
    second = run_stream(spark, data, checkpoint, maxRowsPerBatch=200, consumer="t1")
    assert min(second) == max(first) + 1  # continues, no batch rerun
    assert frame_rows(r for rows in second.values() for r in rows) == journal_rows(more)

    # A crash after a batch ran but before Spark recorded it: the batch runs again, same rows.
    last = max(second)
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    replay = run_stream(spark, data, checkpoint, maxRowsPerBatch=200, consumer="t1")
    assert list(replay) == [last]
    assert frame_rows(replay[last]) == frame_rows(second[last])


def test_stream_fails_when_retention_deleted_unread_rows(spark: Any, tmp_path: Path) -> None:
    data, checkpoint = tmp_path / "data", tmp_path / "ckpt"
    append_journal(data, telemetry(100))
    run_stream(spark, data, checkpoint)
    append_journal(data, telemetry(100))
    store = SqliteStore(data / "telemq.db", "off")
    store.load()
    store.trim_journal(150)  # rows 101..149 were never read by the query
    store.close()
    with pytest.raises(Exception, match="deleted by retention"):
        run_stream(spark, data, checkpoint)
    shutil.rmtree(checkpoint)
    got = run_stream(spark, data, checkpoint, startingSeq="earliest")
    assert sorted(r["seq"] for rows in got.values() for r in rows) == list(range(150, 201))


def test_register_is_idempotent_and_options_are_checked(spark: Any, tmp_path: Path) -> None:
    register(spark)
    register(spark)
    with pytest.raises(ValueError, match="path"):
        SourceOptions.parse({})
    with pytest.raises(ValueError, match="maxRowsPerBatch"):
        SourceOptions.parse({"path": "x", "maxRowsPerBatch": "0"})
    with pytest.raises(Exception) as info:
        SourceOptions.parse({"path": "x", "filter": "temp >"})
    assert getattr(info.value, "reason", None) == 3150
