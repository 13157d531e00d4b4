"""MQTT 5.0 properties in the journal's Arrow encoding (`telemq.journal.arrow`), without Spark.

The journal keeps the properties a broker forwards (`protocol.message_properties`); the
encoding reads two columns from them: `content_type` and `user_properties` (name -> first
value, as a map may not hold a key twice in Spark), each NULL when absent. The packed read,
the row path and ranges with gaps give the same values.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]

from telemq.journal.arrow import JOURNAL_SCHEMA, read_properties
from telemq.pipeline.journal import filter_mask, read_filtered
from telemq.protocol.properties import message_properties
from telemq.protocol.property_table import Properties
from telemq.store import JournalReader, JournalRecord, SqliteStore, WriteBatch

from .helpers import TS0

FULL = message_properties(
    Properties(
        payload_format_indicator=1,
        content_type="application/json",
        correlation_data=b"\x00\x01",
        user_properties=[("site", "lab"), ("unit", "C"), ("site", "roof"), ("unit", "C")],
    )
)
TYPE_ONLY = message_properties(Properties(content_type="text/plain"))
USERS_ONLY = message_properties(Properties(user_properties=[("a", "1"), ("A", "2")]))
FORMAT_ONLY = message_properties(Properties(payload_format_indicator=0))

# (stored properties, expected content_type, expected user_properties)
CASES: list[tuple[bytes, str | None, list[tuple[str, str]] | None]] = [
    (FULL, "application/json", [("site", "lab"), ("unit", "C")]),  # first value wins
    (b"", None, None),  # none: every MQTT 3.1.1 message
    (TYPE_ONLY, "text/plain", None),
    (USERS_ONLY, None, [("a", "1"), ("A", "2")]),  # names are case-sensitive
    (FORMAT_ONLY, None, None),  # properties, but neither of the two
    (b"\xff\x00", None, None),  # bytes no broker writes: none, not a failed read
    (FULL, "application/json", [("site", "lab"), ("unit", "C")]),  # decoded once, used twice
]


def write(data: Path, properties: list[bytes], client_ids: list[str] | None = None) -> None:
    """One journal row per entry of `properties`, seq 1, 2, ..."""
    data.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(data / "telemq.db", "off")
    try:
        seq = store.load().next_seq
        batch = WriteBatch()
        for i, props in enumerate(properties):
            client_id = client_ids[i] if client_ids else "c"
            batch.append_journal(
                JournalRecord(seq, TS0 + seq, "t", "", 1, False, b"x", client_id, "", props)
            )
            seq += 1
        store.commit(batch)
    finally:
        store.close()


def columns(
    data: Path, first: int, last: int, chunk_rows: int = 50_000
) -> list[tuple[object, ...]]:
    """(seq, content_type, user_properties) of the rows read, checking the schema."""
    with JournalReader(data) as reader:
        batches = list(read_filtered(reader, first, last, chunk_rows=chunk_rows))
    assert all(b.schema.equals(JOURNAL_SCHEMA) for b in batches)
    table = pa.Table.from_batches(batches, schema=JOURNAL_SCHEMA)
    return list(
        zip(
            table.column("seq").to_pylist(),
            table.column("content_type").to_pylist(),
            table.column("user_properties").to_pylist(),
            strict=True,
        )
    )


def expected(first_seq: int = 1) -> list[tuple[object, ...]]:
    return [(first_seq + i, ct, up) for i, (_, ct, up) in enumerate(CASES)]


def test_the_schema_has_the_two_columns() -> None:
    assert JOURNAL_SCHEMA.names[-3:] == ["content_type", "user_properties", "broker"]
    assert JOURNAL_SCHEMA.field("content_type").type == pa.string()
    assert JOURNAL_SCHEMA.field("user_properties").type == pa.map_(pa.string(), pa.string())


def test_read_properties_keeps_the_first_value_of_a_name() -> None:
    for stored, content_type, users in CASES:
        assert read_properties(stored) == (content_type, users)


def test_packed_reads_decode_only_what_is_there(tmp_path: Path) -> None:
    write(tmp_path, [props for props, _, _ in CASES])
    for chunk in (1, 3, 1000):  # chunks with and without properties
        assert columns(tmp_path, 1, len(CASES), chunk) == expected()
    write(tmp_path, [b""] * 5)  # a range without any: all NULL
    assert columns(tmp_path, 8, 12) == [(seq, None, None) for seq in range(8, 13)]


def test_the_row_path_and_gaps_give_the_same_columns(tmp_path: Path) -> None:
    # A U+0000 in a text column sends its chunk down the row path.
    write(tmp_path, [props for props, _, _ in CASES], ["c", "c", "nul\x00inside", "c", "", "", ""])
    assert columns(tmp_path, 1, len(CASES)) == expected()
    other = tmp_path / "gaps"
    write(other, [b""] + [props for props, _, _ in CASES])
    raw = sqlite3.connect(other / "telemq.db")
    raw.execute("DELETE FROM journal WHERE seq IN (1, 3)")  # seq 3: the second case, none
    raw.commit()
    raw.close()
    assert columns(other, 1, len(CASES) + 1) == [row for row in expected(2) if row[0] != 3]


@dataclass
class Recorder:
    """A stand-in for a compiled filter: records the properties the evaluator is given."""

    properties: frozenset[str]
    seen: list[dict[str, object]] = field(default_factory=list)

    def matches(self, payload: bytes, properties: dict[str, object]) -> bool:
        self.seen.append(properties)
        return properties.get("ContentType") == "application/json"


def test_the_python_evaluator_reads_content_type_and_user_properties(tmp_path: Path) -> None:
    """The `filter` option given to the format: `Properties.ContentType` and
    `Properties.User.<name>` come from the two columns, as in the compiled Spark filter."""
    write(tmp_path, [props for props, _, _ in CASES])
    with JournalReader(tmp_path) as reader:
        (batch,) = read_filtered(reader, 1, len(CASES))
    flt = Recorder(frozenset({"ContentType", "User.site", "User.a"}))
    mask = filter_mask(batch, flt)  # type: ignore[arg-type]
    assert mask.to_pylist() == [True, False, False, False, False, False, True]
    assert flt.seen[0] == {"ContentType": "application/json", "User.site": "lab", "User.a": None}
    assert flt.seen[1] == {"ContentType": None, "User.site": None, "User.a": None}
    assert flt.seen[3] == {"ContentType": None, "User.site": None, "User.a": "1"}


def test_a_schema_4_file_reads_as_without_properties(tmp_path: Path) -> None:
    """An offline copy of a journal from before the column: every row has none."""
    write(tmp_path, [b"", b""])
    raw = sqlite3.connect(tmp_path / "telemq.db")
    raw.execute("ALTER TABLE journal DROP COLUMN properties")
    raw.execute("PRAGMA user_version = 4")
    raw.commit()
    raw.close()
    assert columns(tmp_path, 1, 2) == [(1, None, None), (2, None, None)]
