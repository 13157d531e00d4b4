"""The SQLite store's file: its tables, the id counters in `meta`, and its migrations.

Theory of operation
-------------------
`SqliteStore` (sqlite.py) opens the file and then calls `migrate`, which brings a file of
any older schema up to `SCHEMA_VERSION` in place, and creates what a new file lacks. Each
step is cheap on a large file: columns are added without rewriting a row, and only schema
1's held QoS 2 messages (a few rows) are copied into a new table. A file newer than this
code is refused by the store before `migrate` runs.

Identifiers are never reused. `load` returns counters one past the largest id a committed
batch named: the current maxima, or the high-water marks kept in the `meta` table when the
largest rows are gone (`read_marks`, `next_ids`). A commit that deletes messages or
deliveries at or above the mark it knows raises the mark in the same transaction
(`RAISE_MARK`: one statement per batch, not a trigger per row); a session's cascade and
`trim_journal` raise it from the rows they remove. Held QoS 2 messages raise it when put,
not when released: the broker holds them before they have an id, so their releases (one per
QoS 2 message) write nothing but the delete.

Every transaction on the file ends in `rollback` when it fails, and `is_corruption` tells
the damage that the store salvages (sqlite_salvage.py) from any other error.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from ._codec import COLUMNS

log = logging.getLogger("telemq.store")

SCHEMA_VERSION = 7
# 2: `incoming` keyed by (client_id, packet_id) itself (WITHOUT ROWID).
# 3: `incoming.released`: released QoS 2 messages are remembered (`_add_released_column`).
# 4: MQTT 5.0: `properties` in messages, retained, incoming; `expiry_at` in messages,
#    incoming (`_add_columns`).
# 5: `journal.properties` (`_add_columns`).
# 6: `journal.origin`, the broker a publication was made at (`_add_columns`).
# 7: `retained.local_only`, a retained message kept from the other brokers (`_add_columns`).
_CORRUPTION = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


# Held QoS 2 messages, one row per (client, packet id): written and deleted once per QoS 2
# message, so the table is its key's b-tree (WITHOUT ROWID: one b-tree to change per row, not
# a table and its key's index). Schema 1 files had a rowid table; `_rebuild_incoming`.
_CREATE_INCOMING = """CREATE TABLE IF NOT EXISTS incoming (
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
    properties BLOB CHECK (typeof(properties) IN ('blob', 'null')),
    expiry_at REAL CHECK (expiry_at IS NULL OR (typeof(expiry_at) = 'real' AND expiry_at >= 0)),
    PRIMARY KEY (client_id, packet_id)
) WITHOUT ROWID;"""

# The CHECK constraints have twins in `_codec.check_*`, which the memory store applies.
# `properties` (messages, retained, incoming, journal): an MQTT 5.0 PUBLISH property block
# without its length, opaque to the store; NULL for none. `expiry_at` (messages, incoming):
# the MQTT 5.0 message expiry, UTC seconds; NULL for never. `origin` (journal): the name of
# the broker the publication was made at; NULL in rows older than schema 6. `local_only`
# (retained): 1 for a retained message whose scope is this broker (MQ PubOpt Local), NULL
# for every broker's (all rows older than schema 7). Last in each table, in the order in
# which `_add_columns` adds them to an older file.
SCHEMA = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (key, value)
    VALUES ('next_seq', 1), ('next_message_id', 1), ('next_delivery_id', 1);
CREATE TABLE IF NOT EXISTS sessions (
    client_id TEXT PRIMARY KEY,
    data TEXT  -- JSON object; NULL when empty
);
CREATE TABLE IF NOT EXISTS subscriptions (
    client_id TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT,
    PRIMARY KEY (client_id, key)
);
CREATE TABLE IF NOT EXISTS retained (
    sub_point TEXT NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    ts_us INTEGER NOT NULL,
    data TEXT,
    properties BLOB CHECK (typeof(properties) IN ('blob', 'null')),
    local_only INTEGER CHECK (local_only IS NULL OR local_only IN (0, 1)),
    PRIMARY KEY (sub_point, topic)
);
-- Each message is stored once; deliveries reference it (mosquitto's base_msgs/client_msgs).
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    sub_point TEXT NOT NULL,
    client_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    ts_us INTEGER NOT NULL,
    properties BLOB CHECK (typeof(properties) IN ('blob', 'null')),
    expiry_at REAL CHECK (expiry_at IS NULL OR (typeof(expiry_at) = 'real' AND expiry_at >= 0))
);
CREATE TABLE IF NOT EXISTS deliveries (
    delivery_id INTEGER PRIMARY KEY,
    client_id TEXT NOT NULL,
    message_id INTEGER NOT NULL,
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 2),
    packet_id INTEGER NOT NULL CHECK (packet_id BETWEEN 0 AND 65535),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    data TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_by_client ON deliveries (client_id);
{_CREATE_INCOMING}
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    ts_us INTEGER NOT NULL,
    topic TEXT NOT NULL,
    sub_point TEXT NOT NULL,
    qos INTEGER NOT NULL CHECK (qos BETWEEN 0 AND 2),
    retain INTEGER NOT NULL CHECK (retain IN (0, 1)),
    payload BLOB NOT NULL CHECK (typeof(payload) = 'blob'),
    client_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    properties BLOB CHECK (typeof(properties) IN ('blob', 'null')),
    origin TEXT
);
-- Offsets of journal readers over the network (the journal service), for retention.
CREATE TABLE IF NOT EXISTS consumers (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    committed_seq INTEGER,
    running INTEGER NOT NULL CHECK (running IN (0, 1)),
    updated_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY,
    table_name TEXT NOT NULL,
    row_json TEXT NOT NULL,
    reason TEXT NOT NULL,
    ts_us INTEGER NOT NULL
);
-- Gone since incoming ids raise the mark when put (`Plan.mark`); kept out of old files.
DROP TRIGGER IF EXISTS incoming_replaced;
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
"""

# Tables without a rowid, and the key that names one of their rows instead.
ROW_KEYS = {"incoming": ("client_id", "packet_id")}


def is_corruption(exc: sqlite3.Error) -> bool:
    """SQLite calls the file corrupt or not a database: salvage it, do not just fail."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _CORRUPTION


def rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction, if one is open, so the connection can be used again."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed")


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the file's tables to `SCHEMA_VERSION`: the steps an older file needs, in
    order, then whatever a new file lacks (`SCHEMA`)."""
    _rebuild_incoming(conn, path)
    _add_released_column(conn)
    _add_columns(conn)
    conn.executescript(SCHEMA)


def _rebuild_incoming(conn: sqlite3.Connection, path: Path) -> None:
    """Schema 1 -> 2: the held QoS 2 messages move to a table keyed by (client_id, packet_id)
    itself. If a row does not fit (only a file edited by hand has such rows), the old table
    stays, which works as well, only slower, and the next start tries again."""
    found = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'incoming'"
    ).fetchone()
    if found is None or "WITHOUT ROWID" in str(found[0]).upper():
        return
    columns = ", ".join(columns_in(conn, "incoming"))
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TRIGGER IF EXISTS incoming_replaced")
        conn.execute("ALTER TABLE incoming RENAME TO incoming_schema_1")
        conn.execute(_CREATE_INCOMING)
        conn.execute(f"INSERT INTO incoming ({columns}) SELECT {columns} FROM incoming_schema_1")
        conn.execute("DROP TABLE incoming_schema_1")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        rollback(conn)
        if is_corruption(exc):
            raise
        log.warning("store %s: held QoS 2 messages stay in their schema 1 table: %s", path, exc)


def columns_in(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    """The columns of `COLUMNS[table]` that the file's table has (older schemas lack some;
    they take their defaults where rows are copied)."""
    present = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
    return tuple(column for column in COLUMNS[table] if column in present)


def _add_released_column(conn: sqlite3.Connection) -> None:
    """Schema 2 -> 3: held QoS 2 messages gain `released` (0 for every existing row).
    Without the CHECK of a new file's column: SQLite would check every old row against all
    the table's constraints, and one bad row (quarantined at load) would stop the start."""
    if (
        "released" in columns_in(conn, "incoming")
        or not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'incoming'"
        ).fetchone()
    ):
        return
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ALTER TABLE incoming ADD COLUMN released INTEGER NOT NULL DEFAULT 0")
    conn.execute("COMMIT")


# Schema 4's to 7's columns, per table, in the order of a new file's tables.
_ADDED_COLUMNS = {
    "messages": (("properties", "BLOB"), ("expiry_at", "REAL")),
    "retained": (("properties", "BLOB"), ("local_only", "INTEGER")),
    "incoming": (("properties", "BLOB"), ("expiry_at", "REAL")),
    "journal": (("properties", "BLOB"), ("origin", "TEXT")),
}


def _add_columns(conn: sqlite3.Connection) -> None:
    """Schema 3 -> 4 -> 5 -> 6 -> 7: stored messages, retained messages and held QoS 2
    messages gain `properties`, and stored and held messages `expiry_at` (4); the journal
    gains `properties` (5) and `origin` (6); retained messages `local_only` (7). NULL for
    every existing row (no properties, never expires, origin unknown, every broker's), each
    where missing (an unreleased schema 4 file may have only `properties`), in one
    transaction that rewrites no row (a long journal costs nothing). Without the CHECKs of a
    new file's columns, for the reason `_add_released_column` gives: loading validates the
    values instead (journal readers take what is not a blob for none). A table not there yet
    (a new file) is left to `_SCHEMA`."""
    existing = {
        str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    missing = [
        (table, column, kind)
        for table, columns in _ADDED_COLUMNS.items()
        if table in existing
        for present in [columns_in(conn, table)]
        for column, kind in columns
        if column not in present
    ]
    if not missing:
        return
    conn.execute("BEGIN IMMEDIATE")
    for table, column, kind in missing:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    conn.execute("COMMIT")


NO_MARKS = {"next_seq": 1, "next_message_id": 1, "next_delivery_id": 1}
RAISE_MARK = "UPDATE meta SET value = MAX(value, ?) WHERE key = ?"  # (value, key)
_MAXIMA = (
    ("next_seq", "SELECT MAX(seq) FROM journal"),
    ("next_message_id", "SELECT MAX(id) FROM messages"),
    (
        "next_message_id",
        "SELECT MAX(message_id) FROM incoming WHERE typeof(message_id) = 'integer'",
    ),
    ("next_delivery_id", "SELECT MAX(delivery_id) FROM deliveries"),
)


def read_marks(conn: sqlite3.Connection) -> dict[str, int]:
    """The high-water marks the file keeps in `meta` (the defaults for any not there)."""
    marks = dict(NO_MARKS)
    for key, value in conn.execute("SELECT key, value FROM meta"):
        if key in marks and isinstance(value, int):
            marks[key] = value
    return marks


def next_ids(
    conn: sqlite3.Connection, marks: dict[str, int], tolerant: bool = False
) -> dict[str, int]:
    """Next ids: past both the high-water marks and the largest ids stored.

    `tolerant` skips tables that cannot be read (salvaging a damaged file).
    """
    counters = dict(marks)
    for key, sql in _MAXIMA:
        try:
            top = conn.execute(sql).fetchone()[0]
        except sqlite3.Error:
            if not tolerant:
                raise
            continue
        if isinstance(top, int):
            counters[key] = max(counters[key], top + 1)
    return counters
