"""SQLite-only behaviour: pragmas, crash durability, damage tolerance, concurrent readers."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import cast

import pytest

import telemq
from telemq.store import (
    DeliveryRecord,
    DeliveryState,
    IncomingRecord,
    JournalReader,
    JournalRecord,
    RetainedRecord,
    RetainedRow,
    SessionRecord,
    SqliteStore,
    StoredMessage,
    StoreError,
    SubscriptionRecord,
    SyncMode,
    WriteBatch,
    _codec,
    open_journal_reader,
)
from telemq.store.sqlite_schema import SCHEMA_VERSION
from telemq.store.sqlite_writes import BOUND_FAST


def journal(seq: int, payload: bytes = b"x") -> JournalRecord:
    return JournalRecord(seq, seq, "t/a", "", 1, False, payload, "pub", "user")


def append(store: SqliteStore, seqs: range, payload: bytes = b"x") -> None:
    batch = WriteBatch()
    for seq in seqs:
        batch.append_journal(journal(seq, payload))
    store.commit(batch)


def connection(store: SqliteStore) -> sqlite3.Connection:
    """The store's own connection: pragmas such as `synchronous` are per connection."""
    conn = store._conn
    assert conn is not None
    return conn


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection for tampering with a closed store's file."""
    return sqlite3.connect(path, isolation_level=None)


@pytest.mark.parametrize(
    ("sync", "level"), [(SyncMode.FULL, 2), (SyncMode.NORMAL, 1), (SyncMode.OFF, 0), ("off", 0)]
)
def test_pragmas_follow_the_settings(tmp_path: Path, sync: SyncMode | str, level: int) -> None:
    store = SqliteStore(tmp_path / "telemq.db", sync)
    try:
        conn = connection(store)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.isolation_level is None
    finally:
        store.close()


def test_a_newer_schema_is_refused_not_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    SqliteStore(path).close()
    with raw(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(path)
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))


_SCHEMA_1_INCOMING = """CREATE TABLE incoming (
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
    PRIMARY KEY (client_id, packet_id)
)"""
_SCHEMA_1_TRIGGER = """CREATE TRIGGER incoming_replaced BEFORE INSERT ON incoming
    WHEN EXISTS (SELECT 1 FROM incoming WHERE client_id = NEW.client_id
                 AND packet_id = NEW.packet_id AND message_id > NEW.message_id)
    BEGIN
        UPDATE meta SET value = MAX(value, (SELECT message_id + 1 FROM incoming
            WHERE client_id = NEW.client_id AND packet_id = NEW.packet_id))
        WHERE key = 'next_message_id';
    END"""


def _held_row(packet_id: int, message_id: int, qos: int = 2) -> tuple[object, ...]:
    return ("c", packet_id, message_id, "in/t", b"q%d" % packet_id, qos, 0, "", "c", "", 5)


def _schema_1_file(path: Path, rows: list[tuple[object, ...]]) -> None:
    """A file as telemq wrote it with schema 1: `incoming` a rowid table with a trigger."""
    SqliteStore(path).close()
    with raw(path) as conn:
        conn.execute("DROP TABLE incoming")
        conn.execute(_SCHEMA_1_INCOMING)
        conn.execute(_SCHEMA_1_TRIGGER)
        conn.execute("PRAGMA ignore_check_constraints = ON")  # rows a hand could have put
        conn.executemany(f"INSERT INTO incoming VALUES ({', '.join('?' * 11)})", rows)
        conn.execute("PRAGMA user_version = 1")
    conn.close()


def _incoming_layout(conn: sqlite3.Connection) -> tuple[bool, list[str]]:
    """(is `incoming` keyed by itself, the names of the triggers)."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'incoming'").fetchone()[0]
    triggers = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    return "WITHOUT ROWID" in sql, [name for (name,) in triggers]


def test_a_schema_1_file_moves_its_held_messages_to_the_keyed_table(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    _schema_1_file(path, [_held_row(1, 9), _held_row(2, 0)])
    store = SqliteStore(path)
    try:
        conn = connection(store)
        assert _incoming_layout(conn) == (True, [])
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        columns = {row[1] for row in conn.execute("PRAGMA table_info(incoming)")}
        assert {"properties", "expiry_at"} <= columns
        state = store.load()
        assert [(r.packet_id, r.message.id) for r in state.incoming] == [(1, 9), (2, 0)]
        assert [r.released for r in state.incoming] == [False, False]
        assert state.next_message_id == 10
        batch = WriteBatch()  # packet id 1 reused: message 9's row goes, its id stays used
        batch.put_incoming(IncomingRecord("c", 1, StoredMessage(0, "in/t", b"again", 2)))
        batch.delete_incoming("c", 2)
        store.commit(batch)
    finally:
        store.close()
    again = SqliteStore(path)
    try:
        state = again.load()
        assert [r.message.payload for r in state.incoming] == [b"again"]
        assert state.next_message_id == 10
    finally:
        again.close()


_SCHEMA_2_INCOMING = _SCHEMA_1_INCOMING + " WITHOUT ROWID"  # the same columns, keyed by itself


def test_a_schema_2_file_keeps_its_held_messages_and_can_remember_released_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "telemq.db"
    SqliteStore(path).close()
    with raw(path) as conn:
        conn.execute("DROP TABLE incoming")
        conn.execute(_SCHEMA_2_INCOMING)
        conn.executemany(f"INSERT INTO incoming VALUES ({', '.join('?' * 11)})", [_held_row(4, 0)])
        conn.execute("PRAGMA user_version = 2")
    conn.close()
    store = SqliteStore(path)
    try:
        assert connection(store).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [(r.packet_id, r.released) for r in store.load().incoming] == [(4, False)]
        batch = WriteBatch()
        batch.put_incoming(IncomingRecord("c", 4, StoredMessage(0, "in/t", b"q4", 2), True))
        store.commit(batch)
    finally:
        store.close()
    again = SqliteStore(path)
    try:
        assert [(r.packet_id, r.released) for r in again.load().incoming] == [(4, True)]
    finally:
        again.close()


def test_a_schema_1_row_that_does_not_fit_is_quarantined_then_the_table_moves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "telemq.db"
    _schema_1_file(path, [_held_row(1, 0), _held_row(2, 0, qos=7)])
    with caplog.at_level(logging.WARNING, logger="telemq.store"):
        store = SqliteStore(path)
    try:
        assert "stay in their schema 1 table" in caplog.text
        assert _incoming_layout(connection(store))[0] is False
        state = store.load()  # works on the old table: the bad row alone is set aside
        assert [r.packet_id for r in state.incoming] == [1]
        assert state.quarantined == 1
    finally:
        store.close()
    again = SqliteStore(path)
    try:
        assert _incoming_layout(connection(again)) == (True, [])
        assert [r.packet_id for r in again.load().incoming] == [1]
    finally:
        again.close()


def test_a_bad_held_message_is_quarantined_by_its_key(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    SqliteStore(path).close()
    with raw(path) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.executemany(
            f"INSERT INTO incoming VALUES ({', '.join('?' * 14)})",
            [
                (*row, 0, None, None)  # released, properties, expiry_at
                for row in (_held_row(1, 0), _held_row(2, 0, qos=7), _held_row(3, 0))
            ],
        )
    conn.close()
    store = SqliteStore(path)
    try:
        state = store.load()
        assert [r.packet_id for r in state.incoming] == [1, 3]
        assert state.quarantined == 1
        assert store.load().quarantined == 0  # deleted, by (client_id, packet_id)
        rows = connection(store).execute("SELECT row_json FROM quarantine").fetchall()
        assert len(rows) == 1 and '"packet_id": 2' in rows[0][0]
    finally:
        store.close()


def test_a_failed_commit_leaves_no_transaction_open(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "telemq.db")
    append(store, range(1, 3))
    with pytest.raises(StoreError):
        append(store, range(2, 4))
    assert not connection(store).in_transaction
    append(store, range(3, 5))
    assert [r.seq for r in store.read_journal(0, 10)] == [1, 2, 3, 4]
    store.close()


# -- crash durability --------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from telemq.store import (
        DeliveryRecord, JournalRecord, SessionRecord, SqliteStore, StoredMessage, WriteBatch,
    )

    store = SqliteStore(sys.argv[1], sys.argv[2])
    store.load()
    for i in range(1, 1_000_000):
        batch = WriteBatch()
        batch.append_journal(JournalRecord(i, i, "t", "", 1, False, i.to_bytes(8, "big"), "c", "u"))
        props = b"\\x03\\x00\\x01a" if i % 2 else b""  # MQTT 5.0 content type, or none
        batch.put_message(StoredMessage(i, "t", b"m%d" % i, 1, properties=props))
        batch.put_delivery(DeliveryRecord(i, "sub", i, 1))
        batch.put_session(SessionRecord("sub", {"last": i}))
        store.commit(batch)
        print(i, flush=True)
    """
)


@pytest.mark.parametrize("sync", list(SyncMode))
def test_committed_batches_survive_sigkill(tmp_path: Path, sync: SyncMode) -> None:
    path = tmp_path / "telemq.db"
    src = str(Path(telemq.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), sync.value],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    reported = 0
    try:
        for line in child.stdout:
            reported = int(line)
            if reported >= 150:
                break
        os.kill(child.pid, signal.SIGKILL)  # mid-stream: it is busy committing the next ones
        for line in child.stdout:  # lines already in the pipe were committed too
            reported = int(line)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert reported >= 150

    store = SqliteStore(path, sync)
    try:
        state = store.load()
        seqs = [r.seq for r in store.read_journal(0, 10_000_000)]
        last = seqs[-1]
        assert last >= reported
        assert seqs == list(range(1, last + 1))  # no gaps: every batch is all or nothing
        assert state.next_seq == last + 1
        assert sorted(state.messages) == list(range(1, last + 1))
        assert all(
            m.properties == (b"\x03\x00\x01a" if i % 2 else b"") for i, m in state.messages.items()
        )
        assert [d.delivery_id for d in state.deliveries] == list(range(1, last + 1))
        assert state.sessions == [SessionRecord("sub", {"last": last})]
        assert state.quarantined == 0
    finally:
        store.close()


# -- damage ------------------------------------------------------------------------------------


def test_a_garbage_file_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "telemq.db"
    garbage = b"this is not an SQLite database, just bytes " * 200
    path.write_bytes(garbage)
    with caplog.at_level(logging.ERROR, logger="telemq.store"):
        store = SqliteStore(path)
    try:
        state = store.load()
        assert state.quarantined >= 1
        assert store.stats().quarantined >= 1
        assert state.sessions == [] and state.next_seq == 1
        [moved] = tmp_path.glob("telemq.db.corrupt-*")
        assert moved.read_bytes() == garbage
        assert [r.levelno for r in caplog.records] == [logging.ERROR]
        assert moved.name in caplog.text and "not a database" in caplog.text
        # The new store works and remembers the incident.
        store.commit(_one_session("after"))
        store.close()
        store = SqliteStore(path)
        again = store.load()
        assert [s.client_id for s in again.sessions] == ["after"]
        assert again.quarantined == 0 and store.stats().quarantined == 1
    finally:
        store.close()


def _one_session(client_id: str) -> WriteBatch:
    batch = WriteBatch()
    batch.put_session(SessionRecord(client_id))
    return batch


def _fill(path: Path) -> None:
    """A store of several hundred pages, checkpointed into the main file."""
    store = SqliteStore(path)
    for i in range(1, 101):
        batch = WriteBatch()
        batch.append_journal(journal(i, os.urandom(1000)))
        batch.put_message(StoredMessage(i, f"t/{i}", os.urandom(1000), 1))
        batch.put_delivery(DeliveryRecord(i, f"c{i % 7}", i, 1))
        batch.put_session(SessionRecord(f"c{i % 7}", {"n": i}))
        batch.put_subscription(SubscriptionRecord(f"c{i % 7}", f"t/{i}", {"qos": 1}))
        if i <= 5:
            held = StoredMessage(0, "in/t", b"held", 2, properties=b"\x01\x01")
            batch.put_incoming(IncomingRecord(f"c{i}", i, held))
        store.commit(batch)
    store.close()  # the last connection's close checkpoints and removes the WAL
    assert not Path(f"{path}-wal").exists()


def test_a_truncated_file_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    _fill(path)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 2)
    store = SqliteStore(path)
    try:
        state = store.load()
        assert state.quarantined >= 1
        assert list(tmp_path.glob("telemq.db.corrupt-*"))
        # Ids of the damaged store are not handed out again where they could be read.
        assert state.next_seq >= 1 and state.next_message_id >= 1
        store.commit(_one_session("after"))
        assert [s.client_id for s in store.load().sessions] == ["after"]
    finally:
        store.close()


def test_a_damaged_file_keeps_its_counters_when_they_are_readable(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    _fill(path)
    with raw(path) as conn:  # damage one table's pages only: deliveries' root page
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'deliveries'")
        page = root.fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with path.open("r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(b"\xff" * page_size)
    store = SqliteStore(path)
    try:
        state = store.load()
        assert state.quarantined >= 1
        assert state.deliveries == []
        assert [(r.client_id, r.packet_id) for r in state.incoming] == [
            (f"c{i}", i) for i in range(1, 6)
        ]  # salvaged: a table without rowids is read whole
        assert {r.message.properties for r in state.incoming} == {b"\x01\x01"}
        assert (state.next_seq, state.next_message_id) == (101, 101)
    finally:
        store.close()


def test_a_bad_json_row_is_quarantined_and_the_rest_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    batch = WriteBatch()
    for name in ("a", "b", "c"):
        batch.put_session(SessionRecord(name, {"name": name}))
        batch.put_subscription(SubscriptionRecord(name, "t/#", {"qos": 1}))
    batch.put_message(StoredMessage(1, "t", b"p", 1))
    batch.put_delivery(DeliveryRecord(1, "a", 1, 1))
    batch.put_delivery(DeliveryRecord(2, "b", 1, 1))
    store.commit(batch)
    store.close()
    with raw(path) as conn:
        conn.execute("UPDATE sessions SET data = '{not json' WHERE client_id = 'b'")
        conn.execute("UPDATE subscriptions SET data = '[1, 2]' WHERE client_id = 'c'")
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE deliveries SET qos = 7 WHERE delivery_id = 2")
        conn.execute("UPDATE sessions SET client_id = CAST(x'41ff' AS TEXT) WHERE client_id = 'c'")
    conn.close()

    store = SqliteStore(path)
    try:
        with caplog.at_level(logging.WARNING, logger="telemq.store"):
            state = store.load()
        assert [s.client_id for s in state.sessions] == ["a"]
        assert [(s.client_id, s.key) for s in state.subscriptions] == [("a", "t/#"), ("b", "t/#")]
        assert [d.delivery_id for d in state.deliveries] == [1]
        assert state.quarantined == 4
        assert store.stats().quarantined == 4
        assert caplog.text.count("quarantined a row") == 4
        rows = (
            connection(store)
            .execute("SELECT table_name, reason, row_json FROM quarantine ORDER BY id")
            .fetchall()
        )
        assert sorted(t for t, _, _ in rows) == [
            "deliveries",
            "sessions",
            "sessions",
            "subscriptions",
        ]
        reasons = " | ".join(r for _, r, _ in rows)
        assert "not valid JSON" in reasons and "not a JSON object" in reasons
        assert "qos" in reasons and "UTF-8" in reasons
        assert any('"{not json"' in j for _, _, j in rows)
    finally:
        store.close()
    # Quarantined rows are gone from their tables: the next load is clean.
    store = SqliteStore(path)
    try:
        assert store.load().quarantined == 0
        assert store.stats().quarantined == 4
    finally:
        store.close()


# -- readers -----------------------------------------------------------------------------------


def test_a_reader_neither_blocks_nor_is_blocked_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    append(store, range(1, 11))
    reader = open_journal_reader(tmp_path)  # a data directory works as well as the file
    try:
        cursor = reader.execute("BEGIN")
        cursor = reader.execute("SELECT seq FROM journal ORDER BY seq")
        assert cursor.fetchmany(3) == [(1,), (2,), (3,)]  # a read transaction is open
        for start in range(11, 211, 10):
            append(store, range(start, start + 10))  # would raise "database is locked" if blocked
        assert store.trim_journal(5) == 4
        # The reader still sees its snapshot, untouched by the commits and the trim.
        assert [seq for (seq,) in cursor.fetchall()] == list(range(4, 11))
        reader.execute("COMMIT")
        rows = reader.execute("SELECT MIN(seq), MAX(seq), COUNT(*) FROM journal").fetchone()
        assert rows == (5, 210, 206)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.execute("DELETE FROM journal")
    finally:
        reader.close()
        store.close()


def test_a_reader_thread_reads_while_the_writer_commits(tmp_path: Path) -> None:
    path = tmp_path / "telemq.db"
    store = SqliteStore(path, SyncMode.OFF)
    append(store, range(1, 2))
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for start in range(2, 3002, 10):
                append(store, range(start, start + 10), payload=b"p" * 200)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    reader = open_journal_reader(path)
    seen: list[int] = []
    try:
        writer.start()
        while True:
            finished = done.is_set()  # before the read: then the read sees every commit
            rows = reader.execute(
                "SELECT seq FROM journal WHERE seq > ? ORDER BY seq LIMIT 500",
                (seen[-1] if seen else 0,),
            ).fetchall()
            seen.extend(seq for (seq,) in rows)
            if finished and not rows:
                break
        writer.join()
    finally:
        reader.close()
        store.close()
    assert errors == []
    assert seen == list(range(1, 3002))


def test_a_reader_needs_an_existing_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        open_journal_reader(tmp_path)


def test_message_count_is_exact_with_duplicate_puts(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "telemq.db")
    try:
        store.load()
        batch = WriteBatch()
        for mid in (1, 2, 1, 2, 3):
            batch.put_message(StoredMessage(mid, "t", b"", 0))
        batch.delete_message(3)
        batch.delete_message(3)
        store.commit(batch)
        assert store.stats().messages == 2
        assert connection(store).execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 2
    finally:
        store.close()


def test_the_journal_reader_reads_ranges_packed_and_row_by_row(tmp_path: Path) -> None:
    """`JournalReader`: the store's read-only API for the pipeline (no SQL outside the store)."""
    store = SqliteStore(tmp_path / "telemq.db", SyncMode.OFF)
    store.load()
    batch = WriteBatch()
    for seq in range(1, 6):
        props = b"\x03\x00\x01%d" % seq if seq in (3, 4) else b""  # Content Type "3", "4"
        origin = "edge" if seq == 4 else ""  # "": this broker's own (the store has no name)
        batch.append_journal(
            JournalRecord(
                seq,
                1000 + seq,
                f"t/{seq}",
                "",
                seq % 3,
                seq == 2,
                b"p%d" % seq,
                "c",
                "u",
                props,
                origin,
            )
        )
    batch.put_subscription(SubscriptionRecord("q1", "7", {"topic": "a/#", "queue": "q1"}))
    store.commit(batch)
    store.trim_journal(2)  # seq 1 goes
    store.close()
    with JournalReader(tmp_path) as reader:
        assert reader.bounds() == (2, 5)
        assert reader.packed_in_order
        packed = reader.packed(2, 4)
        assert (packed.count, packed.low, packed.high) == (3, 2, 4)
        assert packed.topic.split(b"\x00") == [b"t/2", b"t/3", b"t/4"]
        assert packed.flags == b"502"  # qos * 2 + retain per row
        assert packed.lengths == b"2,2,2" and packed.payload == b"p2p3p4"
        assert packed.ts_us == b"1002,1003,1004"
        assert packed.origin.split(b"\x00") == [b"", b"", b"edge"]
        assert reader.packed(10, 20).count == 0
        # Properties only for the rows that have them: their seqs, lengths and bytes.
        assert (packed.property_seqs, packed.property_lengths) == (b"3,4", b"4,4")
        assert packed.properties == b"\x03\x00\x013\x03\x00\x014"
        assert reader.packed(5, 5).property_seqs == b""
        assert reader.seqs(1, 9) == b"2,3,4,5"
        assert reader.rows(4, 5) == [
            (4, 1004, "t/4", "", 1, 0, b"p4", "c", "u", b"\x03\x00\x014", "edge"),
            (5, 1005, "t/5", "", 2, 0, b"p5", "c", "u", None, None),
        ]
        (row,) = reader.subscriptions()
        assert (row.client_id, row.key) == ("q1", "7") and '"a/#"' in row.data
    with pytest.raises(StoreError, match="no store file"):
        JournalReader(tmp_path / "nowhere")


@pytest.mark.parametrize("with_options", [False, True])
def test_the_rows_bound_for_speed_store_what_the_codec_rows_say(
    tmp_path: Path, with_options: bool
) -> None:
    """The per-message tables bind blobs as bytearrays and NULLs as 0 (`sqlite_writes`):
    every column must still hold what `_codec`'s row (the other stores' rows) holds, with
    the same SQL type: a blob, NULL where the row has None."""
    properties = b"\x01\x01" if with_options else b""
    expiry = 1_900_000_000.5 if with_options else 0.0
    message = StoredMessage(
        7, "a/b", b"payload", 2, True, "sp", "c1", "u1", 123, properties, expiry
    )
    incoming = IncomingRecord("c1", 9, message, with_options)
    delivery = DeliveryRecord(
        4, "c1", 7, 1, DeliveryState.INFLIGHT, 3, True, {"x": 1} if with_options else {}
    )
    retained = RetainedRecord(
        "sp",
        "r/t",
        b"kept",
        1,
        55,
        {"client_id": 'c\u00e9"1', "user_id": "", "expiry_at": expiry},
        properties,
        with_options,
    )
    path = tmp_path / "telemq.db"
    store = SqliteStore(path)
    batch = WriteBatch()
    batch.put_message(message)
    batch.put_incoming(incoming)
    batch.put_delivery(delivery)
    batch.put_retained(retained)
    store.commit(batch)
    store.close()
    expected = {
        "messages": _codec.message_row(message),
        "incoming": _codec.incoming_row(incoming),
        "deliveries": _codec.delivery_row(delivery),
        "retained": _codec.retained_row(retained),
    }
    conn = sqlite3.connect(path)
    try:
        for table, row in expected.items():
            columns = _codec.COLUMNS[table]
            typed = ", ".join(f"{c}, typeof({c})" for c in columns)
            stored = conn.execute(f"SELECT {typed} FROM {table}").fetchall()
            assert len(stored) == 1, table
            values, types = stored[0][0::2], stored[0][1::2]
            assert values == row, table
            for column, value, sql_type in zip(columns, row, types, strict=True):
                if value is None:
                    assert sql_type == "null", (table, column)
                elif isinstance(value, bytes):
                    assert sql_type == "blob", (table, column)
    finally:
        conn.close()
    # The broker's retained rows (`put_retained_row`) are bound the same way: replacing
    # the record's row with the row made of the same record changes no value or type.
    typed = ", ".join(f"{c}, typeof({c})" for c in _codec.COLUMNS["retained"])
    with sqlite3.connect(path) as conn:
        before = conn.execute(f"SELECT {typed} FROM retained").fetchall()
    conn.close()
    batch = WriteBatch()
    batch.put_retained_row(cast(RetainedRow, _codec.retained_row(retained, **BOUND_FAST)))
    store = SqliteStore(path)
    store.commit(batch)
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"SELECT {typed} FROM retained").fetchall() == before
    conn.close()
