"""`telemq pipeline ingest --schema/--infer/--merge-schema`: typed columns in every format.

Through the command, as a user runs it: the demo's sensor payloads and a few bad ones go into
the journal table with typed columns or into the quarantine table with a reason (every seq in
exactly one), the schema is recorded in the table, a later run with new fields needs
--merge-schema, a type change and a bad DDL are one line and exit code 2. The tables are read
back by each format's own reader (delta-rs, pyarrow, pyiceberg), not by Spark.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from telemq.cli.demo import Sensor
from telemq.cli.main import main

from .helpers import Pub, append_journal, read_lake_table

pytestmark = pytest.mark.spark

SCHEMA = "sensor STRING, temp DOUBLE, humidity DOUBLE"
BAD = {
    b"not json": "not JSON",
    b'{"sensor": "s9", "temp": "hot"}': 'field temp: expected DOUBLE, got string "hot"',
    bytes([0xFF, 0x00]): "not UTF-8",
    b"[1, 2]": "not a JSON object",
}


def sensor_pubs(count: int, *, battery: bool, seed: int) -> list[Pub]:
    """The demo's sensor readings (with or without the battery field)."""
    rng = random.Random(seed)
    sensors = [Sensor(f"s{i}", f"sensors/s{i}/env", None, 21.0, 40.0) for i in range(3)]
    pubs = []
    for i in range(count):
        reading = sensors[i % 3].reading(rng)
        if not battery:
            del reading["battery"]
        pubs.append(Pub(sensors[i % 3].topic, json.dumps(reading).encode()))
    return pubs


def recorded_schema(table_format: str, lake: Path) -> str:
    if table_format == "delta":
        import deltalake

        value = deltalake.DeltaTable(str(lake / "journal")).metadata().configuration
        return str(value["telemq.payload.schema"])
    if table_format == "iceberg":
        from pyiceberg.catalog import load_catalog

        uri = f"sqlite:///{lake / '_iceberg' / 'catalog.db'}"
        table = load_catalog("telemq", type="sql", uri=uri).load_table("telemq.journal")
        return str(table.properties["telemq.payload.schema"])
    return (lake / "journal" / "_payload_schema").read_text()


@pytest.mark.parametrize("table_format", ["delta", "iceberg", "parquet"])
def test_typed_columns_quarantine_and_merge_in_every_format(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], table_format: str
) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    good = sensor_pubs(9, battery=False, seed=1)
    records = append_journal(data, good + [Pub("sensors/s9/env", p) for p in BAD])
    ingest = ["pipeline", "ingest", "-d", str(data), "-l", str(lake), "--format", table_format]

    assert main([*ingest, "--schema", SCHEMA, "--max-rows-per-batch", "7"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "] batch " in line]
    assert len(lines) == 2 and lines[0].endswith(", 0 quarantined"), captured.err
    assert lines[1].endswith(", 4 quarantined"), captured.err
    assert "quarantined 4 rows" in captured.out, captured.out
    rows = read_lake_table(table_format, lake, "journal").sort_by("seq")
    quarantine = read_lake_table(table_format, lake, "quarantine").sort_by("seq")
    assert rows.column("seq").to_pylist() == [r.seq for r in records[:9]]
    expected = [json.loads(p.payload) for p in good]
    assert rows.column("temp").to_pylist() == [e["temp"] for e in expected]
    assert rows.column("sensor").to_pylist() == [e["sensor"] for e in expected]
    assert rows.schema.field("humidity").type == pa.float64()
    assert quarantine.column("seq").to_pylist() == [r.seq for r in records[9:]]
    assert quarantine.column("reason").to_pylist() == list(BAD.values())
    assert quarantine.column("payload").to_pylist() == list(BAD)
    assert recorded_schema(table_format, lake) == SCHEMA

    # New readings carry a battery field: --infer finds it, and needs --merge-schema to add it.
    more = append_journal(data, sensor_pubs(4, battery=True, seed=2))
    assert main([*ingest, "--infer", "-q"]) == 2
    refused = capsys.readouterr().err.strip()
    assert "adds battery" in refused and "--merge-schema" in refused and "\n" not in refused
    assert main([*ingest, "--infer", "--merge-schema", "-q"]) == 0
    assert recorded_schema(table_format, lake) == f"{SCHEMA}, battery DOUBLE"
    rows = read_lake_table(table_format, lake, "journal").sort_by("seq")
    assert rows.column("seq").to_pylist() == [r.seq for r in records[:9] + more]
    batteries = rows.column("battery").to_pylist()
    assert batteries[:9] == [None] * 9 and None not in batteries[9:]

    # A type change is refused either way, before anything is written.
    assert main([*ingest, "--schema", "temp STRING", "--merge-schema", "-q"]) == 2
    refused = capsys.readouterr().err.strip()
    assert "field temp is DOUBLE in the table and STRING" in refused and "\n" not in refused


def test_a_bad_schema_is_one_line_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    append_journal(data, sensor_pubs(2, battery=False, seed=1))
    command = ["pipeline", "ingest", "-d", str(data), "-l", str(lake)]
    assert main([*command, "--schema", "tags ARRAY<STRING>"]) == 2
    err = capsys.readouterr().err.strip()
    assert "field tags: type ARRAY is not supported" in err and "\n" not in err, err
    assert not lake.exists()
