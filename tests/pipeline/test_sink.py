"""The `telemq` sink: rows published to a live broker; a replayed batch is not published twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from telemq.client import MqttClient
from telemq.pipeline.sink import SinkOptions, TaskResult, _Ledger, publish_rows
from telemq.pipeline.source import register, stream_journal
from telemq.store import JournalReader

from .helpers import append_journal, collect, drain, telemetry

pytestmark = pytest.mark.spark


def broker_journal(data: Path, prefix: str) -> list[tuple[str, bytes, int, bool]]:
    """What the broker journaled under `prefix`, in order (read-only, broker running)."""
    with JournalReader(data) as reader:
        first, last = reader.bounds()
        rows = reader.rows(first, last)
    return [
        (row[2], bytes(row[6]), row[4], bool(row[5])) for row in rows if row[2].startswith(prefix)
    ]


def test_batch_write_publishes_every_row(spark: Any, broker: Any) -> None:
    _, port, data = broker
    register(spark)  # format("telemq") in this session (the jobs' sessions have it already)
    rows = [(f"out/{i % 3}", json.dumps({"i": i}).encode(), i % 3, i < 3) for i in range(60)]
    with MqttClient("127.0.0.1", port, "sink-watcher") as watcher:
        watcher.subscribe([("out/#", 2)])
        frame = spark.createDataFrame(rows, "topic string, payload binary, qos int, retain boolean")
        frame.repartition(3).write.format("telemq").options(host="127.0.0.1", port=str(port)).mode(
            "append"
        ).save()
        got = collect(watcher, 60)
    assert sorted((m.topic, m.payload) for m in got) == sorted((t, p) for t, p, _, _ in rows)
    assert sorted(broker_journal(data, "out/")) == sorted(rows)
    # Rows with retain=true are retained: a new subscriber gets them at once.
    with MqttClient("127.0.0.1", port, "late-watcher") as late:
        late.subscribe([("out/#", 1)])
        retained = {m.topic: m.payload for m in drain(late, 1.0)}
    assert retained == {f"out/{i}": json.dumps({"i": i}).encode() for i in range(3)}

    # A string payload, and a topic option when the frame has no topic column.
    text = spark.createDataFrame([("hello",)], "payload string")
    text.write.format("telemq").options(
        host="127.0.0.1", port=str(port), topic="out/text", qos="1"
    ).mode("append").save()
    assert broker_journal(data, "out/text") == [("out/text", b"hello", 1, False)]


def test_replayed_stream_batch_is_not_published_twice(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    _, port, broker_data = broker
    source = tmp_path / "journal"
    records = append_journal(source, telemetry(400))
    checkpoint, ledger = tmp_path / "ckpt", tmp_path / "ledger"

    def run() -> None:
        from pyspark.sql import functions as F

        frame = stream_journal(
            spark, str(source), options={"maxRowsPerBatch": 100, "rowsPerPartition": 40}
        ).select(
            F.concat(F.lit("copy/"), F.col("topic")).alias("topic"),
            F.concat(F.col("seq").cast("string").cast("binary"), F.lit(b":"), "payload").alias(
                "payload"
            ),
            F.lit(1).alias("qos"),
        )
        query = (
            frame.writeStream.format("telemq")
            .options(host="127.0.0.1", port=str(port), ledger=str(ledger))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    run()
    expected = sorted(
        (f"copy/{r.topic}", f"{r.seq}:".encode() + r.payload, 1, False) for r in records
    )  # tasks of a batch publish in parallel: compare as sets, with counts
    assert sorted(broker_journal(broker_data, "copy/")) == expected

    # Batch 3 ran, but its commit was lost (a crash): Spark runs it again on restart.
    for name in ("3", ".3.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run()
    assert (checkpoint / "commits" / "3").exists()
    assert sorted(broker_journal(broker_data, "copy/")) == expected  # nothing published twice
    progress = sorted((ledger).glob("*/3/*.done"))
    assert len(progress) == 3  # the batch's three partitions (100 rows, 40 per partition)
    assert sum(int(p.read_text()) for p in progress) == 100
    assert not list(ledger.glob("*/2"))  # ledgers of older batches are gone


def test_ledger_resumes_a_partition_after_its_published_rows(broker: Any, tmp_path: Path) -> None:
    _, port, data = broker
    ledger = _Ledger(tmp_path / "q" / "0" / "0.done")
    ledger.record(3)  # a previous attempt got three rows acknowledged, then died
    ledger.close()
    rows = [{"topic": "part/x", "payload": f"{i}".encode()} for i in range(6)]
    options = SinkOptions(port=port)
    assert publish_rows(iter(rows), options, _Ledger(ledger.path)) == TaskResult(3, 3)
    assert [p for _, p, _, _ in broker_journal(data, "part/")] == [b"3", b"4", b"5"]
    assert _Ledger(ledger.path).done() == 6
    assert publish_rows(iter(rows), options, _Ledger(ledger.path)) == TaskResult(0, 6)
    assert len(broker_journal(data, "part/")) == 3


def test_queue_option_puts_rows_on_one_queue_with_the_ledger(broker: Any, tmp_path: Path) -> None:
    """With ``queue``, rows become Put commands: only that session gets them (not routed,
    not journaled), answered one by one; the ledger still skips what was done."""
    _, port, data = broker
    owner = MqttClient("127.0.0.1", port, "sink-q", clean_session=False)
    owner.connect()
    owner.disconnect()  # a persistent session, offline: the Puts wait in its queue
    with MqttClient("127.0.0.1", port, "put-watcher") as watcher:
        watcher.subscribe([("put/#", 2)])
        ledger = _Ledger(tmp_path / "q" / "0" / "0.done")
        ledger.record(2)  # a previous attempt got answers for two rows, then died
        ledger.close()
        rows = [{"topic": f"put/{i % 2}", "payload": f"{i}".encode(), "qos": 1 + i % 2}
                for i in range(7)]  # fmt: skip
        options = SinkOptions(port=port, queue="sink-q", window=2)
        result = publish_rows(iter(rows), options, _Ledger(ledger.path))
        assert result == TaskResult(5, 2, delivered=5, refused=0)
        assert _Ledger(ledger.path).done() == 7
        assert drain(watcher, 0.5) == []  # nobody else gets them
    assert broker_journal(data, "put/") == []  # and they are not journaled
    owner = MqttClient("127.0.0.1", port, "sink-q", clean_session=False)
    assert owner.connect() is True
    try:
        got = collect(owner, 5)
    finally:
        owner.close()
    want = [(f"put/{i % 2}", f"{i}".encode(), 1 + i % 2) for i in range(2, 7)]
    for qos in (1, 2):  # in order per QoS (a QoS 2 Put runs at PUBREL, one round trip later)
        assert [(m.topic, m.payload, m.qos) for m in got if m.qos == qos] == [
            w for w in want if w[2] == qos
        ]
    assert len(got) == len(want)

    # A queue that does not exist: every row is refused, with the broker's reason.
    refused = publish_rows(iter(rows[:3]), SinkOptions(port=port, queue="no-such-queue"))
    assert (refused.published, refused.delivered, refused.refused) == (3, 0, 3)
    assert "reason 3076" in refused.refusal and "no-such-queue" in refused.refusal
    # A row too big for one command is refused without being sent.
    big = [{"topic": "put/big", "payload": b"x" * (1024 * 1024)}]
    too_big = publish_rows(iter(big), SinkOptions(port=port, queue="sink-q"))
    assert too_big.refused == 1 and "reason 3097" in too_big.refusal


def test_batch_write_to_a_queue_fails_on_refusals_and_reports(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    _, port, _ = broker
    register(spark)
    frame = spark.createDataFrame(
        [("put/r", b"a"), ("put/r", b"b")], "topic string, payload binary"
    )
    report = tmp_path / "report.json"
    with pytest.raises(Exception, match="refused 2 of 2"):
        frame.coalesce(1).write.format("telemq").options(
            host="127.0.0.1", port=str(port), queue="nobody-here", report=str(report)
        ).mode("append").save()
    totals = json.loads(report.read_text())
    assert (totals["published"], totals["delivered"], totals["refused"]) == (2, 0, 2)
    assert "reason 3076" in totals["refusal"]


def test_the_sink_speaks_mqtt_5(spark: Any, broker: Any) -> None:
    """`protocol=5`: the rows arrive as from a 3.1.1 sink; a bad value names the option."""
    _, port, data = broker
    register(spark)
    rows = [(f"out5/{i % 2}", f"{i}".encode()) for i in range(20)]
    with MqttClient("127.0.0.1", port, "sink5-watcher", protocol_level=5) as watcher:
        watcher.subscribe([("out5/#", 1)])
        frame = spark.createDataFrame(rows, "topic string, payload binary")
        frame.repartition(2).write.format("telemq").options(
            host="127.0.0.1", port=str(port), protocol="5", qos="2"
        ).mode("append").save()
        got = collect(watcher, 20)
    assert sorted((m.topic, m.payload) for m in got) == sorted(rows)
    assert sorted((t, p) for t, p, _, _ in broker_journal(data, "out5/")) == sorted(rows)
    with pytest.raises(ValueError, match="option protocol"):
        SinkOptions.parse({"protocol": "4.0"})
