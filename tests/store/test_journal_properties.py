"""MQTT 5.0 message properties in the journal (schema 5).

The journal keeps a publication's forwarded properties as the broker encodes them
(`Message.properties`: the properties one after the other, without a length), opaque to the
store: b"" (a record) or 0 / None (a row, `JournalRow`) means none and is stored as NULL, so
that the MQTT 3.1.1 messages, nearly all of them, cost no blob. A schema 4 file gains the
column at start (NULL for every row it holds); a reader of a file that has no column yet
reads none.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from store_harness import Harness
from test_message_properties import _SCHEMA_3

from telemq.store import (
    JournalReader,
    JournalRecord,
    SessionRecord,
    SqliteStore,
    StoreError,
    WriteBatch,
    open_store,
)
from telemq.store.base import JOURNAL_CHUNK_ROWS, JournalRow
from telemq.store.sqlite_schema import SCHEMA_VERSION

# Content Type "a/b", User Properties ("k", "v") and ("k", "w"): a real forwarded block.
PROPS = b"\x03\x00\x03a/b" + b"\x26\x00\x01k\x00\x01v" + b"\x26\x00\x01k\x00\x01w"
OTHER = b"\x01\x01"  # Payload Format Indicator 1


def record(seq: int, properties: bytes = b"", origin: str = "") -> JournalRecord:
    return JournalRecord(
        seq, 1_000 + seq, "t/a", "", 1, False, b"p%d" % seq, "pub", "u", properties, origin
    )


def row(seq: int, properties: bytes | bytearray | int | None) -> JournalRow:
    """A row as the broker appends it (`Router.accept`): bytearrays, retain as an int."""
    return (seq, 1_000 + seq, "t/a", "", 1, 0, bytearray(b"p%d" % seq), "pub", "u", properties)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- both stores ------------------------------------------------------------------------------


def test_properties_round_trip_and_none_reads_back_empty(harness: Harness) -> None:
    batch = WriteBatch()
    batch.append_journal(record(1, PROPS))
    batch.append_journal(record(2))
    batch.append_journal_row(row(3, bytearray(OTHER)))
    batch.append_journal_row(row(4, 0))  # what the broker writes for none
    batch.append_journal_row(row(5, None))
    harness.store.commit(batch)
    expected = [record(1, PROPS), record(2), record(3, OTHER), record(4), record(5)]
    assert harness.store.read_journal(1, 10) == expected
    again = harness.reopen().read_journal(1, 10)
    assert again == expected
    assert [type(r.properties) for r in again] == [bytes] * 5  # b"", not None


@pytest.mark.parametrize("alone", [True, False], ids=["journal-alone", "with-a-session"])
def test_sealed_chunks_and_runs_keep_each_rows_properties(harness: Harness, alone: bool) -> None:
    """Multi-row statements of every size, NULLIF in each of their rows; on PostgreSQL the
    rows of a batch of journal rows alone go by COPY, the others by arrays."""
    total = JOURNAL_CHUNK_ROWS + 700

    def props(seq: int) -> bytes:
        return b"\x03\x00\x02" + (seq % 100).to_bytes(2, "big") if seq % 3 else b""

    batch = WriteBatch()
    if not alone:
        batch.put_session(SessionRecord("c"))
    for seq in range(1, total + 1):
        batch.append_journal(record(seq, props(seq)))
    batch.seal_journal()
    assert len(batch.journal_chunks) == 1
    harness.store.commit(batch)
    records = harness.reopen().read_journal(1, total + 1)
    assert [r.properties for r in records] == [props(seq) for seq in range(1, total + 1)]


@pytest.mark.parametrize("value", ["text", 5, 1.5], ids=["text", "integer", "real"])
def test_properties_that_are_not_bytes_fail_the_batch(harness: Harness, value: object) -> None:
    harness.store.commit(WriteBatch())
    batch = WriteBatch()
    batch.append_journal(record(1, PROPS))
    batch.append_journal_row(row(2, value))  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        harness.store.commit(batch)
    assert harness.reopen().read_journal(0, 10) == []


# -- SQLite -----------------------------------------------------------------------------------


def test_no_properties_are_stored_as_null(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    batch = WriteBatch()
    batch.append_journal(record(1, PROPS))
    batch.append_journal(record(2))
    batch.append_journal_row(row(3, 0))
    batch.append_journal_row(row(4, None))
    store.commit(batch)
    store.close()
    with raw(path) as conn:
        rows = conn.execute("SELECT typeof(properties), properties FROM journal ORDER BY seq")
        assert rows.fetchall() == [("blob", PROPS), ("null", None), ("null", None), ("null", None)]
    conn.close()


# The journal as telemq 4 created it (schema 4: no properties).
_JOURNAL_4 = """
CREATE TABLE journal (
    seq INTEGER PRIMARY KEY,
    ts_us INTEGER NOT NULL,
    topic TEXT NOT NULL,
    sub_point TEXT NOT NULL,
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    client_id TEXT NOT NULL,
    user_id TEXT NOT NULL
);
INSERT INTO journal VALUES (1, 1001, 't/a', '', 1, 0, x'7031', 'pub', 'u');
INSERT INTO journal VALUES (2, 1002, 't/a', '', 1, 0, x'7032', 'pub', 'u');
"""


def _schema_4_file(path: Path) -> None:
    """A schema 4 file: the current tables, but the journal without `properties`."""
    SqliteStore(path).close()
    with raw(path) as conn:
        conn.executescript("DROP TABLE journal;" + _JOURNAL_4 + "PRAGMA user_version = 4;")
    conn.close()


def _journal_columns(path: Path) -> list[str]:
    conn = raw(path)
    try:
        return [r[1] for r in conn.execute("PRAGMA table_info(journal)")]
    finally:
        conn.close()


def test_a_schema_4_journal_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    _schema_4_file(path)
    SqliteStore(tmp_path / "new.db").close()
    store = SqliteStore(path)
    try:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        assert _journal_columns(path) == _journal_columns(tmp_path / "new.db")
        assert _journal_columns(path)[-2:] == ["properties", "origin"]
        state = store.load()
        assert (state.next_seq, state.quarantined) == (3, 0)
        assert store.read_journal(1, 10) == [record(1), record(2)]
        batch = WriteBatch()
        batch.append_journal(record(3, PROPS))
        batch.append_journal_row(row(4, 0))
        store.commit(batch)
    finally:
        store.close()
    again = SqliteStore(path)
    try:
        assert again.read_journal(1, 10) == [
            record(1),
            record(2),
            record(3, PROPS),
            record(4),
        ]
    finally:
        again.close()
    with raw(path) as conn:
        kinds = conn.execute("SELECT typeof(properties) FROM journal ORDER BY seq").fetchall()
        assert [k for (k,) in kinds] == ["null", "null", "blob", "null"]
    conn.close()


def test_a_schema_3_file_upgrades_in_order_to_7(tmp_path: Path) -> None:
    """Every step's columns at once: the held, stored and retained messages' (4), the
    journal's (5, 6) and the retained messages' scope (7); the old rows stay."""
    path = tmp_path / "telemq.db"
    conn = raw(path)
    conn.executescript(_SCHEMA_3 + _JOURNAL_4)
    conn.close()
    SqliteStore(tmp_path / "new.db").close()
    store = SqliteStore(path)
    try:
        state = store.load()
        assert (len(state.messages), len(state.incoming), state.quarantined) == (1, 1, 0)
        assert store.read_journal(1, 10) == [record(1), record(2)]
        live = store._conn
        assert live is not None
        assert live.execute("PRAGMA user_version").fetchone()[0] == 7
        for table in ("messages", "retained", "incoming", "journal"):
            columns = [r[1] for r in live.execute(f"PRAGMA table_info({table})")]
            with raw(tmp_path / "new.db") as fresh:
                assert columns == [r[1] for r in fresh.execute(f"PRAGMA table_info({table})")]
            fresh.close()
    finally:
        store.close()


def test_the_reader_reads_a_schema_4_file_as_it_is(tmp_path: Path) -> None:
    """An offline copy of a schema 4 file (or one an older broker still writes): read-only
    readers cannot add the column, and read every row as having no properties."""
    conn = raw(tmp_path / "telemq.db")
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
        + _JOURNAL_4
        + "PRAGMA user_version = 4;"
    )
    conn.close()
    with JournalReader(tmp_path) as reader:
        assert reader.bounds() == (1, 2)
        assert reader.packed_in_order
        packed = reader.packed(1, 2)
        assert (packed.count, packed.payload, packed.property_seqs) == (2, b"p1p2", b"")
        assert [r[-1] for r in reader.rows(1, 2)] == [None, None]
    assert "properties" not in _journal_columns(tmp_path / "telemq.db")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_origin_is_the_stores_name_or_the_rows_own(tmp_path: Path, kind: str) -> None:
    """A store opened with the broker's name writes it as the origin of the broker's own
    rows (without binding it per row); a row of another broker's publication keeps its."""
    store = open_store(kind, tmp_path, "off", origin="edge-1")
    store.load()
    batch = WriteBatch()
    batch.append_journal_row(row(1, 0))
    batch.append_journal(record(2))
    batch.append_journal(record(3, PROPS, origin="hub"))
    batch.append_foreign_journal_row((*row(4, 0), "far"))
    store.commit(batch)
    assert [r.origin for r in store.read_journal(1, 10)] == ["edge-1", "edge-1", "hub", "far"]
    assert store.read_journal(3, 4)[0] == record(3, PROPS, origin="hub")
    store.close()
    if kind == "sqlite":
        with raw(tmp_path / "telemq.db") as conn:
            origins = conn.execute("SELECT origin FROM journal ORDER BY seq").fetchall()
        conn.close()
        assert [o for (o,) in origins] == ["edge-1", "edge-1", "hub", "far"]
        unnamed = SqliteStore(tmp_path / "telemq.db")  # a tool that opens the file: NULL
        unnamed.load()
        batch = WriteBatch()
        batch.append_journal_row(row(5, 0))
        unnamed.commit(batch)
        assert unnamed.read_journal(5, 6)[0].origin == ""
        unnamed.close()
