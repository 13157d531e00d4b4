"""PostgreSQL-only behaviour of the store: the lock, the schema version, `sync`, connections.

The contract tests (test_store_contract.py and the other harness tests) run against the
PostgreSQL store too; these are what only it has.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from telemq.store import (
    JournalRecord,
    PostgresLocation,
    SessionRecord,
    StoreError,
    SyncMode,
    WriteBatch,
    open_reader,
    open_store,
)
from telemq.store.postgres import PostgresStore
from telemq.store.postgres_reader import PostgresJournalReader
from telemq.store.postgres_schema import SCHEMA_VERSION, NewerSchema
from testsupport.postgres import PostgresServer
from testsupport.process import free_port


def journal(seq: int, origin: str = "") -> JournalRecord:
    return JournalRecord(
        seq, 1_000 + seq, "t/a", "", 1, False, b"p%d" % seq, "pub", "u", b"", origin
    )


def commit_journal(store: PostgresStore, seqs: range) -> None:
    batch = WriteBatch()
    for seq in seqs:
        batch.append_journal(journal(seq))
    store.commit(batch)


def setting(store: PostgresStore, name: str) -> Any:
    conn = store._conn
    assert conn is not None
    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return row[0]


def test_a_second_store_on_the_same_database_is_refused(postgres_dsn: str) -> None:
    first = PostgresStore(postgres_dsn, origin="broker-a")
    try:
        with pytest.raises(StoreError, match="the store is in use by another broker") as caught:
            PostgresStore(postgres_dsn, origin="broker-b")
        assert "telemq (broker broker-a)" in str(caught.value)  # the holder's application name
        # Readers take no lock.
        with open_reader(PostgresLocation(postgres_dsn)) as reader:
            assert reader.bounds() == (1, 0)
    finally:
        first.close()
    second = PostgresStore(postgres_dsn)  # closing the first released the lock
    second.close()


def test_other_databases_on_the_server_are_other_stores(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with postgres_server.database() as other:
        first = PostgresStore(postgres_dsn)
        second = PostgresStore(postgres_server.dsn(other))
        first.close()
        second.close()


def test_a_newer_schema_is_refused_and_left_alone(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    commit_journal(store, range(1, 4))
    conn = store._conn
    assert conn is not None
    conn.execute("UPDATE telemq_schema SET version = %s", (SCHEMA_VERSION + 1,))
    store.close()
    with pytest.raises(NewerSchema, match=f"schema version {SCHEMA_VERSION + 1}, newer than"):
        PostgresStore(postgres_dsn)
    with pytest.raises(NewerSchema):
        PostgresJournalReader(postgres_dsn)
    import psycopg

    with psycopg.connect(postgres_dsn) as raw:
        assert raw.execute("SELECT version FROM telemq_schema").fetchall() == [
            (SCHEMA_VERSION + 1,)
        ]
        assert raw.execute("SELECT count(*) FROM journal").fetchone() == (3,)


def test_the_schema_is_created_once_and_kept(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    commit_journal(store, range(1, 3))
    store.close()
    store = PostgresStore(postgres_dsn)  # the tables are there: migrate changes nothing
    assert [r.seq for r in store.read_journal(0, 10)] == [1, 2]
    conn = store._conn
    assert conn is not None
    assert conn.execute("SELECT version FROM telemq_schema").fetchall() == [(SCHEMA_VERSION,)]
    store.close()


def test_a_reader_of_a_database_without_a_store_says_so(postgres_dsn: str) -> None:
    with pytest.raises(StoreError, match="no telemq store"):
        PostgresJournalReader(postgres_dsn)


@pytest.mark.parametrize(("sync", "expected"), [("full", "on"), ("normal", "off"), ("off", "off")])
def test_sync_sets_synchronous_commit(postgres_dsn: str, sync: str, expected: str) -> None:
    store = PostgresStore(postgres_dsn, SyncMode(sync))
    try:
        assert setting(store, "synchronous_commit") == expected
        commit_journal(store, range(1, 2))
        assert store.last_sync_seconds > 0
    finally:
        store.close()


def test_the_store_connects_again_after_losing_its_connection(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    store = PostgresStore(postgres_dsn, origin="edge")
    try:
        commit_journal(store, range(1, 3))
        conn = store._conn
        assert conn is not None
        pid = conn.info.backend_pid
        postgres_server.admin("SELECT pg_terminate_backend(%s)", (pid,))
        batch = WriteBatch()
        batch.put_session(SessionRecord("lost"))
        with pytest.raises(StoreError):
            store.commit(batch)  # the connection is gone: nothing applied
        commit_journal(store, range(3, 4))  # connected again, the lock taken again
        assert store._conn is not None and store._conn.info.backend_pid != pid
        assert [r.seq for r in store.read_journal(0, 10)] == [1, 2, 3]
        assert store.load().sessions == []
        with pytest.raises(StoreError, match="in use by another broker"):
            PostgresStore(postgres_dsn)
    finally:
        store.close()


def test_several_hosts_take_the_one_that_accepts_writes(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    dead = free_port()
    dsn = postgres_dsn.replace(
        f"host=127.0.0.1 port={postgres_server.port}",
        f"host=127.0.0.1,127.0.0.1 port={dead},{postgres_server.port}",
    )
    store = PostgresStore(f"{dsn} target_session_attrs=read-write")
    try:
        commit_journal(store, range(1, 2))
        assert store._conn is not None and store._conn.info.port == postgres_server.port
    finally:
        store.close()


def test_the_password_can_come_from_a_file(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no.pgpass"))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    dsn = postgres_dsn.replace(f" password={postgres_server.password}", "")
    with pytest.raises(StoreError, match=r"no password supplied.*password_file"):
        PostgresStore(dsn)
    secret = tmp_path / "password"
    secret.write_text(postgres_server.password + "\n", encoding="utf-8")
    PostgresStore(PostgresLocation(dsn, str(secret))).close()
    with pytest.raises(StoreError, match=r"cannot read the postgres store's password_file"):
        PostgresStore(PostgresLocation(dsn, str(tmp_path / "missing")))
    secret.write_text("wrong\n", encoding="utf-8")
    with pytest.raises(StoreError, match="password authentication failed"):
        PostgresStore(PostgresLocation(dsn, str(secret)))
    # The message names the server, never the password.
    try:
        PostgresStore(PostgresLocation(dsn, str(secret)))
    except StoreError as error:
        assert "wrong" not in str(error) and "\n" not in str(error)


def test_bad_dsns_and_refused_connections_are_one_line_errors(postgres_dsn: str) -> None:
    for dsn, words in [
        ("this is not a dsn", "dsn is not valid"),
        (f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=5", "Connection refused"),
        (postgres_dsn.replace("dbname=", "dbname=missing_"), "does not exist"),
    ]:
        with pytest.raises(StoreError) as caught:
            PostgresStore(dsn)
        assert words in str(caught.value)
        assert "\n" not in str(caught.value)


def test_open_store_opens_the_postgres_store(postgres_dsn: str) -> None:
    with pytest.raises(ValueError, match="needs a dsn"):
        open_store("postgres", None)
    store = open_store("postgres", None, "off", postgres=PostgresLocation(postgres_dsn))
    try:
        assert isinstance(store, PostgresStore) and store.sync is SyncMode.OFF
    finally:
        store.close()


def test_the_origin_is_the_stores_name_or_the_rows_own(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn, origin="edge-1")
    batch = WriteBatch()
    batch.append_journal(journal(1))
    batch.append_journal(journal(2, origin="hub"))
    batch.append_foreign_journal_row((3, 3, "t", "", 0, 0, bytearray(b"x"), "c", "u", 0, "far"))
    store.commit(batch)
    assert [r.origin for r in store.read_journal(1, 10)] == ["edge-1", "hub", "far"]
    store.close()
    unnamed = PostgresStore(postgres_dsn)
    batch = WriteBatch()
    batch.append_journal(journal(4))
    unnamed.commit(batch)
    assert unnamed.read_journal(4, 5)[0].origin == ""
    unnamed.close()


def test_stats_measure_the_tables(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    try:
        before = store.stats().bytes_on_disk
        batch = WriteBatch()
        for seq in range(1, 2001):
            batch.append_journal(journal(seq))
        store.commit(batch)  # COPY
        stats = store.stats()
        assert stats.bytes_on_disk > before > 0
        assert (stats.journal_rows, stats.journal_first_seq, stats.journal_last_seq) == (
            2000,
            1,
            2000,
        )
    finally:
        store.close()


def test_psycopg_is_not_needed_to_import_the_store_package() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import telemq.store, telemq.broker\n"
        "from telemq.store import open_store\n"
        "try:\n"
        "    open_store('postgres', None, postgres=telemq.store.PostgresLocation('x'))\n"
        "except telemq.store.StoreError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert "pip install 'telemq[postgres]'" in done.stdout
