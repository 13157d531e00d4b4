"""MQTT 5.0 message properties kept with stored, retained and held QoS 2 messages, and the
message expiry kept with stored and held ones (schema 4).

The store keeps properties as an opaque blob (the PUBLISH property block without its length);
b"" means none and is stored as NULL. `expiry_at` is UTC seconds; 0.0 means never and is
stored as NULL. (Retained messages keep their expiry in `data`.)
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from store_harness import Harness

from telemq.store import (
    DeliveryRecord,
    IncomingRecord,
    RetainedRecord,
    SqliteStore,
    StoredMessage,
    StoreError,
    WriteBatch,
    _codec,
)
from telemq.store.sqlite_schema import SCHEMA_VERSION

# Content Type "a/b", User Property ("k", "v"), Message Expiry Interval 60: a real block.
PROPS = b"\x03\x00\x03a/b" + b"\x26\x00\x01k\x00\x01v" + b"\x02\x00\x00\x00\x3c"
OTHER = b"\x01\x01"  # Payload Format Indicator 1
TABLES = ("messages", "retained", "incoming")
EXPIRY = 1_900_000_000.25  # UTC seconds (in 2030), exact as a double


def message(mid: int, properties: bytes = b"", expiry_at: float = 0.0) -> StoredMessage:
    return StoredMessage(
        mid, "t/a", b"p%d" % mid, 1, False, "", "pub", "u", 7, properties, expiry_at
    )


def held(
    packet_id: int, properties: bytes = b"", released: bool = False, expiry_at: float = 0.0
) -> IncomingRecord:
    msg = StoredMessage(0, "in/t", b"q", 2, False, "", "c", "", 5, properties, expiry_at)
    return IncomingRecord("c", packet_id, msg, released)


def full_batch() -> WriteBatch:
    batch = WriteBatch()
    batch.put_message(message(1, PROPS))
    batch.put_message(message(2))
    batch.put_delivery(DeliveryRecord(1, "s", 1, 1))
    batch.put_delivery(DeliveryRecord(2, "s", 2, 1))
    batch.put_retained(RetainedRecord("", "r/1", b"r", 1, 3, {}, PROPS))
    batch.put_retained(RetainedRecord("", "r/2", b"r", 0))
    batch.put_incoming(held(1, PROPS))
    batch.put_incoming(held(2))
    return batch


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- both stores ------------------------------------------------------------------------------


def test_properties_round_trip_across_a_restart(harness: Harness) -> None:
    harness.store.commit(full_batch())
    state = harness.reopen().load()
    assert state.messages == {1: message(1, PROPS), 2: message(2)}
    assert [(r.topic, r.properties) for r in state.retained] == [("r/1", PROPS), ("r/2", b"")]
    assert state.incoming == [held(1, PROPS), held(2)]
    assert type(state.messages[2].properties) is bytes  # b"", not None
    assert state.quarantined == 0


def test_replacing_and_releasing_keep_the_right_properties(harness: Harness) -> None:
    harness.store.commit(full_batch())
    batch = WriteBatch()
    batch.put_retained(RetainedRecord("", "r/1", b"r", 1))  # replaced: properties gone
    batch.put_retained(RetainedRecord("", "r/2", b"r", 0, 0, {}, OTHER))
    batch.put_incoming(held(2, OTHER))
    batch.release_incoming("c", 1)
    batch.put_message(message(1, OTHER))  # messages are immutable: the stored one stays
    harness.store.commit(batch)
    state = harness.reopen().load()
    assert [r.properties for r in state.retained] == [b"", OTHER]
    assert state.incoming == [held(1, PROPS, released=True), held(2, OTHER)]
    assert state.messages[1].properties == PROPS


def test_runs_of_many_rows_keep_each_rows_properties(harness: Harness) -> None:
    batch = WriteBatch()
    for mid in range(1, 601):  # multi-row statements of every size
        batch.put_message(message(mid, b"\x23" + mid.to_bytes(2, "big") if mid % 3 else b""))
        batch.put_delivery(DeliveryRecord(mid, "s", mid, 1))
    harness.store.commit(batch)
    state = harness.reopen().load()
    assert all(
        m.properties == (b"\x23" + mid.to_bytes(2, "big") if mid % 3 else b"")
        for mid, m in state.messages.items()
    )
    assert len(state.messages) == 600


@pytest.mark.parametrize("table", TABLES)
def test_properties_that_are_not_bytes_fail_the_batch(harness: Harness, table: str) -> None:
    harness.store.commit(full_batch())
    before = harness.store.load()
    text: bytes = "not bytes"  # type: ignore[assignment]
    batch = WriteBatch()
    batch.put_message(message(9))
    if table == "messages":
        batch.put_message(message(10, text))
    elif table == "retained":
        batch.put_retained(RetainedRecord("", "r/9", b"r", 0, 0, {}, text))
    else:
        batch.put_incoming(held(9, text))
    with pytest.raises(StoreError):
        harness.store.commit(batch)
    assert harness.reopen().load() == before


# -- SQLite -----------------------------------------------------------------------------------


def test_no_properties_are_stored_as_null(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    store.commit(full_batch())
    store.close()
    with raw(path) as conn:
        for table, key in (("messages", "id"), ("retained", "topic"), ("incoming", "packet_id")):
            rows = conn.execute(f"SELECT typeof(properties) FROM {table} ORDER BY {key}")
            assert [kind for (kind,) in rows] == ["blob", "null"], table
    conn.close()


# The schema 3 tables that schema 4 changes, as telemq 3 created them.
_SCHEMA_3 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE retained (
    sub_point TEXT NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    ts_us INTEGER NOT NULL,
    data TEXT,
    PRIMARY KEY (sub_point, topic)
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    sub_point TEXT NOT NULL,
    client_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    ts_us INTEGER NOT NULL
);
CREATE TABLE deliveries (
    delivery_id INTEGER PRIMARY KEY,
    client_id TEXT NOT NULL,
    message_id INTEGER NOT NULL,
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 2),
    packet_id INTEGER NOT NULL CHECK (packet_id BETWEEN 0 AND 65535),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    data TEXT
);
CREATE TABLE incoming (
    client_id TEXT NOT NULL,
    packet_id INTEGER NOT NULL CHECK (packet_id BETWEEN 1 AND 65535),
    message_id INTEGER NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    sub_point TEXT NOT NULL,
    msg_client_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    ts_us INTEGER NOT NULL,
    released INTEGER NOT NULL DEFAULT 0 CHECK (released IN (0, 1)),
    PRIMARY KEY (client_id, packet_id)
) WITHOUT ROWID;
INSERT INTO retained VALUES ('', 'r/old', x'72', 1, 3, NULL);
INSERT INTO messages VALUES (1, 't/a', x'7031', 1, 0, '', 'pub', 'u', 7);
INSERT INTO deliveries VALUES (1, 's', 1, 1, 0, 0, 0, NULL);
INSERT INTO incoming VALUES ('c', 1, 0, 'in/t', x'71', 2, 0, '', 'c', '', 5, 1);
PRAGMA user_version = 3;
"""


def _schema_3_file(path: Path) -> None:
    conn = raw(path)
    conn.executescript(_SCHEMA_3)
    conn.close()


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _new_file_columns(path: Path) -> dict[str, list[str]]:
    SqliteStore(path).close()
    conn = raw(path)
    try:
        return {table: _columns(conn, table) for table in TABLES}
    finally:
        conn.close()


def test_a_schema_3_file_gains_the_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    _schema_3_file(path)
    new_file = _new_file_columns(tmp_path / "new.db")
    store = SqliteStore(path)
    try:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        for table in TABLES:
            assert _columns(conn, table) == new_file[table], table  # same columns, same order
        assert new_file["messages"][-2:] == new_file["incoming"][-2:] == ["properties", "expiry_at"]
        assert new_file["retained"][-2:] == ["properties", "local_only"]
        state = store.load()
        assert state.messages == {1: message(1)}
        assert state.retained == [RetainedRecord("", "r/old", b"r", 1, 3)]
        assert state.incoming == [held(1, released=True)]
        assert state.quarantined == 0
        batch = WriteBatch()
        batch.put_message(message(2, PROPS, EXPIRY))
        batch.put_delivery(DeliveryRecord(2, "s", 2, 1))
        batch.put_retained(RetainedRecord("", "r/old", b"r", 1, 3, {}, OTHER))
        batch.put_incoming(held(2, PROPS, expiry_at=EXPIRY))
        store.commit(batch)
    finally:
        store.close()
    again = SqliteStore(path)
    try:
        state = again.load()
        assert state.messages == {1: message(1), 2: message(2, PROPS, EXPIRY)}
        assert [r.properties for r in state.retained] == [OTHER]
        assert state.incoming == [held(1, released=True), held(2, PROPS, expiry_at=EXPIRY)]
        assert state.quarantined == 0
    finally:
        again.close()


def test_a_schema_4_file_without_expiry_gains_the_column(tmp_path: Path) -> None:
    """Schema 4 first had `properties` alone (never released): such a file gains `expiry_at`
    and keeps its properties."""
    path = tmp_path / "telemq.db"
    conn = raw(path)
    conn.executescript(
        _SCHEMA_3
        + "".join(f"ALTER TABLE {table} ADD COLUMN properties BLOB;" for table in TABLES)
        + "UPDATE messages SET properties = x'0101'; UPDATE incoming SET properties = x'0101';"
        + "PRAGMA user_version = 4;"
    )
    conn.close()
    new_file = _new_file_columns(tmp_path / "new.db")
    store = SqliteStore(path)
    try:
        live = store._conn
        assert live is not None
        assert {table: _columns(live, table) for table in TABLES} == new_file
        state = store.load()
        assert state.messages == {1: message(1, OTHER)}
        assert state.incoming == [held(1, OTHER, released=True)]
        batch = WriteBatch()
        batch.put_incoming(held(2, expiry_at=EXPIRY))
        store.commit(batch)
        assert store.load().incoming[1] == held(2, expiry_at=EXPIRY)
    finally:
        store.close()


def _bad_properties(path: Path, value: object) -> None:
    """Rows of every table with properties of the wrong type, a good one beside each."""
    store = SqliteStore(path)
    store.commit(full_batch())
    store.close()
    with raw(path) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")  # a schema 3 file has no CHECK
        conn.execute("UPDATE messages SET properties = ? WHERE id = 2", (value,))
        conn.execute("UPDATE retained SET properties = ? WHERE topic = 'r/2'", (value,))
        conn.execute("UPDATE incoming SET properties = ? WHERE packet_id = 2", (value,))
    conn.close()


@pytest.mark.parametrize("value", ["text", 5, 1.5], ids=["text", "integer", "real"])
def test_properties_of_the_wrong_type_are_quarantined(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, value: object
) -> None:
    path = tmp_path / "telemq.db"
    _bad_properties(path, value)
    store = SqliteStore(path)
    try:
        with caplog.at_level(logging.WARNING, logger="telemq.store"):
            state = store.load()
        assert state.messages == {1: message(1, PROPS)}
        assert [r.topic for r in state.retained] == ["r/1"]
        assert state.incoming == [held(1, PROPS)]
        # The bad rows, and the delivery of the bad message (its message is gone).
        assert state.quarantined == 4
        conn = store._conn
        assert conn is not None
        rows = conn.execute("SELECT table_name, reason FROM quarantine ORDER BY id").fetchall()
        assert sorted(t for t, _ in rows) == ["deliveries", "incoming", "messages", "retained"]
        assert sum("properties is not a blob" in reason for _, reason in rows) == 3
        assert store.load().quarantined == 0  # set aside for good
    finally:
        store.close()


# -- message expiry: both stores --------------------------------------------------------------


def expiring_batch() -> WriteBatch:
    batch = WriteBatch()
    batch.put_message(message(1, PROPS, EXPIRY))
    batch.put_message(message(2))
    batch.put_delivery(DeliveryRecord(1, "s", 1, 1))
    batch.put_delivery(DeliveryRecord(2, "s", 2, 1))
    batch.put_incoming(held(1, PROPS, expiry_at=EXPIRY))
    batch.put_incoming(held(2))
    return batch


def test_expiry_round_trips_across_a_restart(harness: Harness) -> None:
    harness.store.commit(expiring_batch())
    state = harness.reopen().load()
    assert state.messages == {1: message(1, PROPS, EXPIRY), 2: message(2)}
    assert state.incoming == [held(1, PROPS, expiry_at=EXPIRY), held(2)]
    assert type(state.messages[2].expiry_at) is float  # 0.0, not None
    assert type(state.incoming[1].message.expiry_at) is float
    assert state.quarantined == 0


def test_releasing_and_replacing_keep_the_right_expiry(harness: Harness) -> None:
    harness.store.commit(expiring_batch())
    batch = WriteBatch()
    batch.release_incoming("c", 1)
    batch.put_incoming(held(2, expiry_at=EXPIRY + 60))
    batch.put_message(message(1))  # messages are immutable: the stored one, and its expiry, stay
    harness.store.commit(batch)
    state = harness.reopen().load()
    assert state.incoming == [
        held(1, PROPS, released=True, expiry_at=EXPIRY),
        held(2, expiry_at=EXPIRY + 60),
    ]
    assert state.messages[1].expiry_at == EXPIRY
    batch = WriteBatch()
    batch.put_incoming(held(1, released=True))  # replaced: expiry gone
    harness.store.commit(batch)
    assert harness.reopen().load().incoming[0] == held(1, released=True)


def test_an_integer_expiry_reads_back_as_a_float(harness: Harness) -> None:
    batch = WriteBatch()
    batch.put_message(message(1, expiry_at=1_900_000_000))
    batch.put_delivery(DeliveryRecord(1, "s", 1, 1))
    batch.put_incoming(held(1, expiry_at=5))
    harness.store.commit(batch)
    state = harness.reopen().load()
    assert [type(m.expiry_at) for m in (state.messages[1], state.incoming[0].message)] == [
        float,
        float,
    ]
    assert (state.messages[1].expiry_at, state.incoming[0].message.expiry_at) == (1.9e9, 5.0)


@pytest.mark.parametrize("table", ["messages", "incoming"])
@pytest.mark.parametrize("value", [-1.0, -1, float("nan"), float("-inf"), "soon"], ids=str)
def test_an_invalid_expiry_fails_the_batch(harness: Harness, table: str, value: object) -> None:
    harness.store.commit(expiring_batch())
    before = harness.store.load()
    expiry: float = value  # type: ignore[assignment]
    batch = WriteBatch()
    batch.put_message(message(9))
    if table == "messages":
        batch.put_message(message(10, expiry_at=expiry))
    else:
        batch.put_incoming(held(9, expiry_at=expiry))
    with pytest.raises(StoreError):
        harness.store.commit(batch)
    assert harness.reopen().load() == before


def test_a_nan_expiry_does_not_decode() -> None:
    """Neither store lets a NaN in (SQLite cannot even hold one): the decoder's own check."""
    row = _codec.message_row(message(1, expiry_at=EXPIRY))
    assert _codec.message_from_row(row).expiry_at == EXPIRY
    with pytest.raises(_codec.BadRecord, match="expiry_at"):
        _codec.message_from_row((*row[:-1], float("nan")))


# -- message expiry: SQLite -------------------------------------------------------------------


def test_no_expiry_is_stored_as_null(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    store.commit(expiring_batch())
    store.close()
    with raw(path) as conn:
        for table, key in (("messages", "id"), ("incoming", "packet_id")):
            rows = conn.execute(f"SELECT typeof(expiry_at), expiry_at FROM {table} ORDER BY {key}")
            assert rows.fetchall() == [("real", EXPIRY), ("null", None)], table
    conn.close()


def _quarantine(store: SqliteStore) -> list[tuple[str, str]]:
    conn = store._conn
    assert conn is not None
    return conn.execute("SELECT table_name, reason FROM quarantine ORDER BY id").fetchall()


@pytest.mark.parametrize("value", ["soon", b"\x00", -1.0], ids=["text", "blob", "negative"])
def test_an_expiry_that_is_not_a_time_is_quarantined(tmp_path: Path, value: object) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    store.commit(expiring_batch())
    store.close()
    with raw(path) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")  # as a hand could
        conn.execute("UPDATE messages SET expiry_at = ? WHERE id = 2", (value,))
        conn.execute("UPDATE incoming SET expiry_at = ? WHERE packet_id = 2", (value,))
    conn.close()
    store = SqliteStore(path)
    try:
        state = store.load()
        assert state.messages == {1: message(1, PROPS, EXPIRY)}
        assert state.incoming == [held(1, PROPS, expiry_at=EXPIRY)]
        assert state.quarantined == 3  # the bad rows, and the delivery of the bad message
        rows = _quarantine(store)
        assert sorted(t for t, _ in rows) == ["deliveries", "incoming", "messages"]
        assert sum("expiry_at is not a number" in reason for _, reason in rows) == 2
        assert store.load().quarantined == 0  # set aside for good
    finally:
        store.close()


@pytest.mark.parametrize("value", [-1.0, float("nan")], ids=["negative", "nan"])
def test_a_migrated_file_quarantines_an_invalid_expiry_at_load(
    tmp_path: Path, value: float
) -> None:
    """A column added to an old file has no CHECK: the value goes in and loading sets the
    row aside (a NaN goes in as text, not as the NULL SQLite would make of it)."""
    path = tmp_path / "telemq.db"
    _schema_3_file(path)
    store = SqliteStore(path)
    try:
        batch = WriteBatch()
        batch.put_message(message(2, expiry_at=value))
        batch.put_delivery(DeliveryRecord(2, "s", 2, 1))
        batch.put_incoming(held(2, expiry_at=value))
        store.commit(batch)
        state = store.load()
        assert state.messages == {1: message(1)}
        assert state.incoming == [held(1, released=True)]
        assert state.quarantined == 3
        assert sum("expiry_at is not a number" in reason for _, reason in _quarantine(store)) == 2
    finally:
        store.close()
