"""Sparkplug B metrics in Spark (telemq.pipeline.sparkplug_rows): journal rows in, one row per
metric and a quarantine with reasons out; aliases resolved through BIRTHs, across batches
and across a restart of a streaming query over the same checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from telemq.pipeline import sparkplug_fast
from telemq.pipeline.source import read_journal, stream_journal
from telemq.pipeline.sparkplug_births import BirthLedger, Births
from telemq.pipeline.sparkplug_rows import (
    birth_rows,
    decode_batch,
    decode_sparkplug,
    sparkplug_metrics,
    split_decoded,
)
from telemq.sparkplug import (
    DataSet,
    DataType,
    Metric,
    Payload,
    PropertySet,
    PropertyValue,
    encode_payload,
)
from telemq.sparkplug.schema import PAYLOAD

from .helpers import TS0, Pub, append_journal

NODE = "spBv1.0/Plant/{}/edge1"
DEVICE = "spBv1.0/Plant/{}/edge1/pump"


def birth(*metrics: Metric) -> bytes:
    return encode_payload(Payload(timestamp=1_700_000_000_000, seq=0, metrics=metrics))


def data(seq: int, *metrics: Metric) -> bytes:
    return encode_payload(Payload(timestamp=1_700_000_000_000 + seq, seq=seq, metrics=metrics))


NBIRTH = birth(
    Metric("bdSeq", 0, datatype=DataType.Int64, value=0),
    Metric("Pressure", 1, datatype=DataType.Float, value=2.5),
    Metric(
        "Label",
        2,
        datatype=DataType.String,
        value="north",
        properties=PropertySet(("engUnit",), (PropertyValue(DataType.String, "none"),)),
    ),
)
DBIRTH = birth(
    Metric("Speed", 10, datatype=DataType.Int16, value=-5),
    Metric("Running", 11, datatype=DataType.Boolean, value=True),
    Metric(
        "Table",
        12,
        datatype=DataType.DataSet,
        value=DataSet(("a", "b"), (DataType.Int32, DataType.String), ((1, "x"),)),
    ),
)
# Data by alias only, without datatypes, as edge nodes send it.
NDATA = data(1, Metric(alias=1, timestamp=5, value=3.75, wire_field="float_value"))
DDATA = data(2, Metric(alias=10, value=0xFFFE), Metric(alias=11, is_null=True))


def journal() -> list[Pub]:
    unknown_alias = data(3, Metric(alias=99, value=1))
    return [  # journal seqs start at 1
        Pub(NODE.format("NDATA"), NDATA),  # seq 1: before any BIRTH: quarantined
        Pub(NODE.format("NBIRTH"), NBIRTH),  # seq 2
        Pub(NODE.format("NDATA"), NDATA),  # seq 3
        Pub(DEVICE.format("DDATA"), DDATA),  # seq 4: the device has no BIRTH yet
        Pub(DEVICE.format("DBIRTH"), DBIRTH),  # seq 5
        Pub(DEVICE.format("DDATA"), DDATA),  # seq 6
        Pub(DEVICE.format("DDATA"), unknown_alias),  # seq 7
        Pub("spBv1.0/Plant/NDATA", NDATA),  # seq 8: broken topic
        Pub(NODE.format("NDATA"), b"\xff\x00garbage"),  # seq 9: not protobuf
        Pub(DEVICE.format("DDEATH"), data(4)),  # seq 10: no metrics: one row
        Pub(NODE.format("NDEATH"), birth(Metric("bdSeq", datatype=DataType.Int64, value=0))),
        Pub("spBv1.0/STATE/scada", b'{"online":true,"timestamp":1}'),  # seq 12
        Pub("sensors/other", b"{}"),  # seq 13: not Sparkplug: in neither frame
        Pub(NODE.format("NBIRTH"), birth(Metric("Pressure", 1, datatype=DataType.Double))),
        Pub(DEVICE.format("DDATA"), DDATA),  # seq 15: its DBIRTH predates the new NBIRTH
        Pub(
            DEVICE.format("DBIRTH"),
            birth(
                Metric("a", 1, datatype=DataType.Int8, value=1),
                Metric("b", 1, datatype=DataType.Int8, value=2),
            ),
        ),
        Pub(DEVICE.format("DDATA"), DDATA),  # seq 17: still no valid DBIRTH
    ]


COLUMNS = ["seq", "message_type", "device", "name", "alias", "datatype", "int_value",
           "double_value", "boolean_value", "string_value", "is_null"]  # fmt: skip


@pytest.mark.spark
def test_births_data_and_deaths_become_metric_rows_and_the_rest_is_quarantined(
    spark: Any, tmp_path: Path
) -> None:
    append_journal(tmp_path, journal())
    metrics, quarantine = sparkplug_metrics(read_journal(spark, str(tmp_path)))
    # One Spark job per frame (an orderBy would run the decoder twice: once to sample).
    collected = sorted(metrics.collect(), key=lambda r: (r["seq"], r["metric_index"] or 0))
    rows = [tuple(r[c] for c in COLUMNS) for r in collected]
    assert rows == [
        (2, "NBIRTH", None, "bdSeq", 0, "Int64", 0, None, None, None, False),
        (2, "NBIRTH", None, "Pressure", 1, "Float", None, 2.5, None, None, False),
        (2, "NBIRTH", None, "Label", 2, "String", None, None, None, "north", False),
        (3, "NDATA", None, "Pressure", 1, "Float", None, 3.75, None, None, False),
        (5, "DBIRTH", "pump", "Speed", 10, "Int16", -5, None, None, None, False),
        (5, "DBIRTH", "pump", "Running", 11, "Boolean", None, None, True, None, False),
        (5, "DBIRTH", "pump", "Table", 12, "DataSet", None, None, None, None, False),
        (6, "DDATA", "pump", "Speed", 10, "Int16", -2, None, None, None, False),
        (6, "DDATA", "pump", "Running", 11, "Boolean", None, None, None, None, True),
        (10, "DDEATH", "pump", None, None, None, None, None, None, None, None),
        (11, "NDEATH", None, "bdSeq", None, "Int64", 0, None, None, None, False),
        (12, "STATE", None, None, None, None, None, None, None,
         '{"online":true,"timestamp":1}', None),
        (14, "NBIRTH", None, "Pressure", 1, "Double", None, None, None, None, True),
    ]  # fmt: skip
    first = next(r for r in collected if r["seq"] == 2 and r["name"] == "Label")
    assert first["properties"] == {"engUnit": "none"}
    assert first["group"] == "Plant" and first["edge_node"] == "edge1"
    assert str(first["payload_ts"].year) == "2023"
    assert next(r for r in collected if r["seq"] == 3)["metric_ts"].timestamp() == 0.005
    table = next(r for r in collected if r["name"] == "Table")["dataset"]
    assert table["columns"] == ["a", "b"] and table["types"] == ["Int32", "String"]
    assert [(c["int_value"], c["string_value"]) for c in table["rows"][0]] == [
        (1, None),
        (None, "x"),
    ]
    assert next(r for r in collected if r["seq"] == 12)["host_id"] == "scada"

    held = sorted(quarantine.collect(), key=lambda r: (r["seq"], r["metric_index"] or 0))
    reasons = [(r["seq"], r["metric_index"], r["reason"]) for r in held]
    assert reasons == [
        (1, 0, "alias 1: no BIRTH of this edge node before it"),
        (4, 0, "alias 10: no BIRTH of this device before it"),
        (4, 1, "alias 11: no BIRTH of this device before it"),
        (7, 0, "alias 99 is not in the BIRTH at seq 5"),
        (8, None, "topic: too few levels for <group>/<type>/<edge node>"),
        (9, None, reasons[5][2]),
        (15, 0, "alias 10: no BIRTH of this device before it"),
        (15, 1, "alias 11: no BIRTH of this device before it"),
        (16, None, "BIRTH gives alias 1 to both 'a' and 'b'"),
        (17, 0, "alias 10: no BIRTH of this device before it"),
        (17, 1, "alias 11: no BIRTH of this device before it"),
    ]
    assert reasons[5][2].startswith("not a Sparkplug B protobuf message")
    assert next(r for r in held if r["seq"] == 9)["payload"] == b"\xff\x00garbage"


@pytest.mark.spark
def test_aliases_resolve_across_batches_and_a_restart(spark: Any, tmp_path: Path) -> None:
    """A streaming job with a BirthLedger beside its checkpoint: the BIRTH is in the first
    run's batch; a second query over the same checkpoint decodes later DATA by alias."""
    data_dir, checkpoint = tmp_path / "data", tmp_path / "checkpoint"
    append_journal(data_dir, [Pub(NODE.format("NBIRTH"), NBIRTH), Pub(NODE.format("NDATA"), NDATA)])
    seen: list[tuple[int, str, float | None]] = []
    reasons: list[str] = []

    def run() -> None:
        ledger = BirthLedger(spark, checkpoint / "sparkplug")

        def each(frame: Any, batch_id: int) -> None:
            decoded = decode_sparkplug(frame, ledger, batch_id).persist()  # decoded once
            metrics, quarantine = split_decoded(decoded)
            seen.extend((r.seq, r.name, r.double_value) for r in metrics.collect())
            reasons.extend(r.reason for r in quarantine.collect())
            decoded.unpersist()

        query = (
            stream_journal(spark, str(data_dir))
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(checkpoint / "spark"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    run()
    assert [s for s in seen if s[0] == 2] == [(2, "Pressure", 3.75)]
    append_journal(
        data_dir,
        [Pub(NODE.format("NDATA"), data(2, Metric(alias=1, value=4.5, wire_field="float_value")))],
    )
    seen.clear()
    run()  # a new query: only the new row, its alias from the first run's BIRTH
    assert seen == [(3, "Pressure", 4.5)]
    assert reasons == []
    files = sorted(p.name for p in (checkpoint / "sparkplug").glob("births-*.json"))
    assert files == ["births-000000000000.json", "births-000000000001.json"]


@pytest.mark.spark
def test_a_replayed_batch_starts_from_the_state_before_it(spark: Any, tmp_path: Path) -> None:
    """The ledger answers a batch with what the greatest earlier batch saved, so a replay
    decodes as its first attempt did; old files are dropped."""
    ledger = BirthLedger(spark, tmp_path / "births")
    assert ledger.before(0).to_json() == Births().to_json()
    frame = read_journal_frame(spark, tmp_path)
    state = birth_rows(frame)
    for batch_id in range(6):
        ledger.save(batch_id, state)
    assert ledger.before(6).to_json() == state.to_json()
    assert ledger.before(0).to_json() == Births().to_json()
    assert sorted(p.name for p in (tmp_path / "births").glob("births-*.json"))[0] == (
        "births-000000000002.json"
    )


def read_journal_frame(spark: Any, tmp_path: Path) -> Any:
    append_journal(tmp_path / "journal", [Pub(NODE.format("NBIRTH"), NBIRTH)])
    return read_journal(spark, str(tmp_path / "journal"))


def test_the_fast_path_gives_what_the_full_decoder_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every message decoded twice, with and without the fast path: the same batch."""
    messages = [(p.topic, p.payload) for p in journal()]
    for value, field in [(0xFFFFFFFE, "int_value"), (2**40, "long_value"), (70000, "int_value")]:
        message = PAYLOAD(seq=5)
        metric = message.metrics.add(alias=10)
        setattr(metric, field, value)  # Int16 in various widths, one out of range
        messages.append((DEVICE.format("DDATA"), message.SerializeToString()))
    odd = [
        data(6, Metric("Pressure", value=1.0, wire_field="double_value")),  # wrong field
        data(7, Metric("Pressure", value=1.25, wire_field="float_value", timestamp=2**62)),
        data(8, Metric("Label", value="south", is_historical=True, is_transient=True)),
        data(9, Metric(alias=2, datatype=DataType.Int32, value=3)),  # BIRTH says String
        encode_payload(Payload(seq=300, metrics=(Metric(alias=1, value=1),))),
    ]
    messages += [(NODE.format("NDATA"), m) for m in odd]
    batch = pa.RecordBatch.from_pydict(
        {
            "seq": list(range(len(messages))),
            "ts": pa.array([TS0 + i for i in range(len(messages))], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "topic": [t for t, _ in messages],
            "payload": [p for _, p in messages],
        }
    )
    births = Births()
    from telemq.pipeline.sparkplug_births import Birth
    from telemq.sparkplug import MessageType, decode_payload

    births.add_node(("Plant", "edge1"), Birth.of(1, decode_payload(NBIRTH, MessageType.NBIRTH)))
    births.add_device(
        ("Plant", "edge1", "pump"), Birth.of(4, decode_payload(DBIRTH, MessageType.DBIRTH))
    )
    fast = decode_batch(batch, births)
    monkeypatch.setattr(sparkplug_fast.FastDecoder, "decode", lambda *args: False)
    slow = decode_batch(batch, births)
    assert fast.to_pylist() == slow.to_pylist()
    assert fast.num_rows > len(messages)


@pytest.mark.spark
@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_ingest_sparkplug_writes_metric_and_quarantine_tables(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], table_format: str
) -> None:
    """`telemq pipeline ingest --sparkplug`: the BIRTH in the first batch resolves the
    aliases of the second (the ledger beside the checkpoint), a run again adds nothing, and
    every table is read back by the format's own reader."""
    from telemq.cli.main import main

    from .helpers import read_lake_table

    data, lake = tmp_path / "data", tmp_path / "lake"
    append_journal(
        data,
        [
            Pub(NODE.format("NBIRTH"), NBIRTH),  # seq 1
            Pub("sensors/other", b"{}"),  # seq 2: not Sparkplug
            Pub(NODE.format("NDATA"), NDATA),  # seq 3: alias 1 from the BIRTH of batch 0
            Pub(DEVICE.format("DDATA"), DDATA),  # seq 4: no DBIRTH: quarantined
        ],
    )
    ingest = ["pipeline", "ingest", "-d", str(data), "-l", str(lake), "--format", table_format]
    assert main([*ingest, "--sparkplug", "--max-rows-per-batch", "2", "-q"]) == 0
    assert "sparkplug: 4 metric rows, 2 rows quarantined" in capsys.readouterr().out
    assert main([*ingest, "--sparkplug", "-q"]) == 0
    assert "sparkplug: 0 metric rows, 0 rows quarantined" in capsys.readouterr().out
    journal_rows = read_lake_table(table_format, lake, "journal")
    assert sorted(journal_rows.column("seq").to_pylist()) == [1, 2, 3, 4]
    metrics = read_lake_table(table_format, lake, "sparkplug_metrics").sort_by(
        [("seq", "ascending"), ("metric_index", "ascending")]
    )
    assert [(r["seq"], r["name"], r["double_value"]) for r in metrics.to_pylist()] == [
        (1, "bdSeq", None),
        (1, "Pressure", 2.5),
        (1, "Label", None),
        (3, "Pressure", 3.75),
    ]
    held = read_lake_table(table_format, lake, "sparkplug_quarantine").sort_by("metric_index")
    assert held.column("seq").to_pylist() == [4, 4]
    assert held.column("reason").to_pylist()[0] == "alias 10: no BIRTH of this device before it"
