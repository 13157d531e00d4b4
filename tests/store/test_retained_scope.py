"""The scope of a retained message (schema 7, `retained.local_only`): one made by an MQ
Publish with PubOpt Local stays at its broker, across restarts too, so the store keeps the
flag with it. NULL (every row of an older file) means every broker's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from store_harness import Harness

from telemq.store import RetainedRecord, SqliteStore, WriteBatch, _codec
from telemq.store.sqlite_schema import SCHEMA_VERSION


def retained(topic: str, local_only: bool = False) -> RetainedRecord:
    return RetainedRecord("", topic, b"v", 1, 3, {"client_id": "c"}, b"", local_only)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_the_scope_round_trips_across_a_restart(harness: Harness) -> None:
    batch = WriteBatch()
    batch.put_retained(retained("r/local", local_only=True))
    batch.put_retained(retained("r/global"))
    harness.store.commit(batch)
    state = harness.reopen().load()
    assert state.retained == [retained("r/global"), retained("r/local", local_only=True)]
    batch = WriteBatch()
    batch.put_retained(retained("r/local"))  # a global publication replaces it
    harness.store.commit(batch)
    assert [r.local_only for r in harness.reopen().load().retained] == [False, False]


def test_a_global_row_stores_null(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    batch = WriteBatch()
    batch.put_retained(retained("r/local", local_only=True))
    batch.put_retained(retained("r/global"))
    store.commit(batch)
    store.close()
    with raw(path) as conn:
        rows = conn.execute("SELECT topic, local_only FROM retained ORDER BY topic").fetchall()
    conn.close()
    assert rows == [("r/global", None), ("r/local", 1)]


def test_a_schema_6_file_gains_the_column_and_its_rows_stay_global(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    SqliteStore(path).close()
    with raw(path) as conn:
        conn.executescript(
            "ALTER TABLE retained DROP COLUMN local_only;"
            "INSERT INTO retained VALUES ('', 'r/old', x'76', 1, 3, NULL, NULL);"
            "PRAGMA user_version = 6;"
        )
    conn.close()
    SqliteStore(tmp_path / "new.db").close()
    store = SqliteStore(path)
    try:
        live = store._conn
        assert live is not None
        assert live.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        with raw(tmp_path / "new.db") as fresh:
            expected = [r[1] for r in fresh.execute("PRAGMA table_info(retained)")]
        assert [r[1] for r in live.execute("PRAGMA table_info(retained)")] == expected
        assert expected[-1] == "local_only"
        state = store.load()
        assert state.retained == [RetainedRecord("", "r/old", b"v", 1, 3)]
        assert state.quarantined == 0
        batch = WriteBatch()
        batch.put_retained(retained("r/new", local_only=True))
        store.commit(batch)
    finally:
        store.close()
    again = SqliteStore(path)
    try:
        assert [(r.topic, r.local_only) for r in again.load().retained] == [
            ("r/new", True),
            ("r/old", False),
        ]
    finally:
        again.close()


@pytest.mark.parametrize("value", [2, "yes", 1.5], ids=["integer", "text", "real"])
def test_a_scope_that_is_not_a_flag_is_quarantined(tmp_path: Path, value: object) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    batch = WriteBatch()
    batch.put_retained(retained("r/bad"))
    batch.put_retained(retained("r/good", local_only=True))
    store.commit(batch)
    store.close()
    with raw(path) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")  # an upgraded file has no CHECK
        conn.execute("UPDATE retained SET local_only = ? WHERE topic = 'r/bad'", (value,))
    conn.close()
    store = SqliteStore(path)
    try:
        state = store.load()
        assert state.retained == [retained("r/good", local_only=True)]
        assert state.quarantined == 1
    finally:
        store.close()


def test_the_memory_store_checks_the_scope_as_sqlite_does() -> None:
    row = (*_codec.retained_row(retained("r/x"))[:7], 2)
    with pytest.raises(_codec.BadRecord, match="local_only"):
        _codec.check_retained(row)
    _codec.check_retained(_codec.retained_row(retained("r/x", local_only=True)))
