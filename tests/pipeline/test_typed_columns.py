"""Typed columns: the payload schema (DDL, JSON, merge, inference) and the split of journal
rows into typed rows and quarantine, on a real journal of the demo's sensor payloads."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from telemq.cli.demo import Sensor
from telemq.pipeline.source import read_journal
from telemq.pipeline.table_format import LakeError
from telemq.pipeline.typed_columns import (
    QUARANTINE_COLUMNS,
    PayloadSchema,
    resolve_schema,
)

from .helpers import Pub, append_journal

SENSOR_DDL = "sensor STRING, temp DOUBLE, humidity DOUBLE, battery DOUBLE"


def sensor_payloads(count: int, seed: int = 7) -> list[bytes]:
    """Readings of the demo's simulated sensors, as the demo publishes them."""
    rng = random.Random(seed)
    sensors = [Sensor(f"s{i:02d}", f"sensors/lab/s{i:02d}", None, 22.0 + i, 40.0) for i in range(4)]
    return [json.dumps(sensors[i % 4].reading(rng)).encode() for i in range(count)]


# payload -> the reason it is quarantined for with SENSOR_DDL (None: it fits)
ODD_SENSOR_PAYLOADS: list[tuple[bytes, str | None]] = [
    (b"not json", "not JSON"),
    (b"", "not JSON"),
    (b'{"temp": 1}{"temp": 2}', "not JSON"),
    (bytes([0xFF, 0xFE, 0x7B]), "not UTF-8"),
    (b"[21.5, 40]", "not a JSON object"),
    (b"  42", "not a JSON object"),
    (b'{"sensor": "s09", "temp": "hot"}', 'field temp: expected DOUBLE, got string "hot"'),
    (b'{"sensor": "s09", "temp": "31"}', 'field temp: expected DOUBLE, got string "31"'),
    (b'{"sensor": 9, "temp": 20.5}', "field sensor: expected STRING, got number 9"),
    (
        b'{"temp": 1e400, "humidity": true}',
        "field temp: number out of range for DOUBLE;"
        " field humidity: expected DOUBLE, got boolean true",
    ),
    (
        b'{"sensor": "s09", "battery": {"level": 3}}',
        'field battery: expected DOUBLE, got object {"level":3}',
    ),
    (b'{"sensor": "s09"}', None),  # missing fields are NULL
    (b'{"sensor": "s09", "temp": null, "extra": [1, 2]}', None),  # null; unknown fields ignored
    (b' {"temp": 21}\n', None),  # an integer is a DOUBLE
]

SITE_DDL = "site STRUCT<room: STRING, floor: INT>, `count` BIGINT NOT NULL"
SITE_PAYLOADS: list[tuple[bytes, str | None]] = [
    (b'{"site": {"room": "lab", "floor": 2}, "count": 3}', None),
    (
        b'{"site": {"room": "lab", "floor": 2.5}, "count": 3}',
        "field site.floor: expected INT, got number 2.5",
    ),
    (b'{"site": "lab", "count": 3}', 'field site: expected STRUCT, got string "lab"'),
    (b'{"site": {"floor": 1}}', "field count: missing or null"),
    (
        b'{"count": 99999999999999999999}',
        "field count: 99999999999999999999 out of range for BIGINT",
    ),
    (b'{"count": 4}', None),
]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, tuple[str, bytes]]]:
    """A broker's journal (its data directory; seq -> topic, payload): 60 sensor readings,
    the odd payloads, the site payloads."""
    data = tmp_path_factory.mktemp("typed") / "data"
    pubs = [Pub("sensors/lab/s00", p) for p in sensor_payloads(60)]
    pubs += [Pub("sensors/lab/odd", p) for p, _ in ODD_SENSOR_PAYLOADS]
    pubs += [Pub("sites/lab", p) for p, _ in SITE_PAYLOADS]
    records = append_journal(data, pubs)
    return str(data), {r.seq: (r.topic, r.payload) for r in records}


def _split(spark: Any, where: str, ddl: str, topics: str) -> tuple[dict[int, Any], dict[int, Any]]:
    frame = read_journal(spark, where, topics=topics)
    with PayloadSchema.parse(ddl).split(frame) as batch:
        rows = {r["seq"]: r.asDict(recursive=True) for r in batch.rows.collect()}
        quarantine = {r["seq"]: r.asDict() for r in batch.quarantine.collect()}
        assert batch.quarantined() == len(quarantine)
        assert list(batch.rows.columns) == [*frame.columns, *PayloadSchema.parse(ddl).names]
        assert tuple(batch.quarantine.columns) == QUARANTINE_COLUMNS
    return rows, quarantine


@pytest.mark.spark
def test_split_types_sensor_payloads_and_quarantines_the_rest(
    spark: Any, journal: tuple[str, dict[int, tuple[str, bytes]]]
) -> None:
    where, published = journal
    rows, quarantine = _split(spark, where, SENSOR_DDL, "sensors/#")
    sensors = {s for s, (topic, _) in published.items() if topic.startswith("sensors/")}
    # nothing dropped, nothing twice
    assert set(rows) | set(quarantine) == sensors and not set(rows) & set(quarantine)
    expected = dict(zip(sorted(sensors)[60:], [r for _, r in ODD_SENSOR_PAYLOADS], strict=True))
    assert {seq: q["reason"] for seq, q in quarantine.items()} == {
        seq: reason for seq, reason in expected.items() if reason is not None
    }
    for seq, q in quarantine.items():
        assert (q["topic"], bytes(q["payload"])) == published[seq]
        assert q["ts"] is not None and q["client_id"] == "c1"
    for seq, row in rows.items():
        document = json.loads(published[seq][1])
        assert bytes(row["payload"]) == published[seq][1]  # the payload is kept
        for name in ("sensor", "temp", "humidity", "battery"):
            assert row[name] == document.get(name), (seq, name)
    assert len(rows) >= 60  # every reading of the demo's sensors fits


@pytest.mark.spark
def test_split_checks_structs_and_not_null(
    spark: Any, journal: tuple[str, dict[int, tuple[str, bytes]]]
) -> None:
    where, published = journal
    rows, quarantine = _split(spark, where, SITE_DDL, "sites/#")
    seqs = sorted(s for s, (topic, _) in published.items() if topic.startswith("sites/"))
    expected = dict(zip(seqs, [r for _, r in SITE_PAYLOADS], strict=True))
    assert {seq: q["reason"] for seq, q in quarantine.items()} == {
        seq: reason for seq, reason in expected.items() if reason is not None
    }
    assert sorted(rows) == [seq for seq, reason in expected.items() if reason is None]
    assert [(rows[s]["site"], rows[s]["count"]) for s in sorted(rows)] == [
        ({"room": "lab", "floor": 2}, 3),
        (None, 4),
    ]


@pytest.mark.spark
def test_infer_from_a_sample_of_the_journal(
    spark: Any, journal: tuple[str, dict[int, tuple[str, bytes]]]
) -> None:
    frame = read_journal(spark, journal[0])
    inferred = PayloadSchema.infer(frame, sample_rows=60)  # the sensors' readings
    assert inferred.to_ddl() == SENSOR_DDL
    assert PayloadSchema.infer(frame, sample_rows=60) == inferred  # deterministic
    # over every row, the odd payloads give each sensor field values of two kinds
    everything = PayloadSchema.infer(frame)
    assert everything.to_ddl() == "count DOUBLE"
    assert set(everything.skipped) == {"sensor", "temp", "humidity", "battery", "extra", "site"}
    with pytest.raises(LakeError, match="sample rows"):
        PayloadSchema.infer(frame, sample_rows=0)


def test_ddl_round_trip_and_spark_json() -> None:
    from pyspark.sql.types import StructType

    ddl = "temp DOUBLE, n BIGINT NOT NULL, site STRUCT<room: STRING, `my floor`: DECIMAL(5,2)>"
    schema = PayloadSchema.parse(
        "temp double,n LONG not null, site struct<room string, `my floor` decimal(5, 2)>"
    )
    assert schema.to_ddl() == ddl
    assert PayloadSchema.parse(schema.to_ddl()) == schema
    spark_type = StructType.fromJson(json.loads(schema.to_json()))
    assert spark_type.fieldNames() == ["temp", "n", "site"]
    assert spark_type["n"].nullable is False
    assert spark_type["site"].dataType.simpleString() == "struct<room:string,my floor:decimal(5,2)>"


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("", "payload schema: empty"),
        ("temp", "unexpected end at position 5"),
        ("temp DOUBLE humidity DOUBLE", "unexpected 'humidity' at position 13"),
        ("temp DOUBEL", "field temp: type DOUBEL is not supported"),
        ("tags ARRAY<STRING>", "field tags: type ARRAY is not supported"),
        ("seq BIGINT", "field seq clashes with the journal's column seq"),
        ("Topic STRING", "field Topic clashes with the journal's column topic"),
        ("date DATE", "field date clashes"),
        ("temp DOUBLE, TEMP DOUBLE", "field TEMP given twice"),
        ("temp DOUBLE;", "unexpected ';' at position 12"),
        ("site STRUCT<room STRING", "expected '>' to close the STRUCT of field site"),
        ("price DECIMAL(40,2)", "DECIMAL(40,2) out of range"),
        ("`it's` STRING", "may not be empty or hold a quote"),
        ("temp DOUBLE NOT", "expected NULL after NOT"),
    ],
)
def test_bad_ddl_is_one_line_naming_the_problem(ddl: str, message: str) -> None:
    with pytest.raises(LakeError, match="payload schema") as error:
        PayloadSchema.parse(ddl)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_merge_adds_fields_and_refuses_type_changes() -> None:
    table = PayloadSchema.parse("temp DOUBLE, site STRUCT<room: STRING>")
    new = PayloadSchema.parse("humidity DOUBLE, site STRUCT<floor: INT, room: STRING>, temp DOUBLE")
    assert table.merge(new).to_ddl() == (
        "temp DOUBLE, site STRUCT<room: STRING, floor: INT>, humidity DOUBLE"
    )
    changed = PayloadSchema.parse("site STRUCT<room: BIGINT>")
    with pytest.raises(LakeError, match=r"field site\.room is STRING in the table and BIGINT"):
        table.merge(changed)
    assert table.merge(changed, keep_types=True) == table
    # what ingest calls: the table's schema, the one given, --merge-schema or not
    assert resolve_schema(None, new, merge=False) == new
    assert resolve_schema(table, PayloadSchema.parse("temp DOUBLE"), merge=False) == table
    with pytest.raises(LakeError, match="adds humidity: give --merge-schema"):
        resolve_schema(table, new, merge=False)
    assert resolve_schema(table, new, merge=True) == table.merge(new)


def test_infer_payloads_rules() -> None:
    inferred = PayloadSchema.infer_payloads(
        [
            b"not json",
            b'{"a": 1, "b": null, "tags": [1], "seq": 5, "ok": true}',
            b'{"n": NaN}',  # not JSON: ignored
            b'{"a": 2.5, "o": {"x": "y"}, "ok": false}',
            b'{"o": {"z": 1}, "mixed": 1}',
            b'{"mixed": "1"}',
            None,
        ]
    )
    assert inferred.to_ddl() == "a DOUBLE, ok BOOLEAN, o STRUCT<x: STRING, z: DOUBLE>"
    assert inferred.skipped == ("b", "tags", "mixed", "seq")
    with pytest.raises(LakeError, match="no payload of the sample is a JSON object"):
        PayloadSchema.infer_payloads([b"[1]", b"x"])
