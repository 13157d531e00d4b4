"""`SqliteStore`: the default durable store, one SQLite file in WAL mode (stdlib `sqlite3`).

Commit path. `commit` opens a `BEGIN IMMEDIATE` transaction, sorts the batch's ops into
one lane per table (keeping their order within each table: ops on different tables commute),
writes each run of same-kind ops in a lane with a few multi-row statements (cached), then
the journal rows (kept flat by the batch, one statement per sealed chunk), and ends with
`COMMIT`; with `synchronous=FULL` that is one fsync of the WAL per batch. So the broker's
"journal, message, delivery" per publication costs a few statements per batch, not three per
message. Per op, Python only builds a parameter tuple (`_codec`); `data` is
JSON-encoded only when not empty. Any error rolls back and raises `StoreError`.

Identifiers are never reused. `load` returns counters one past the largest id a committed
batch named: the current maxima, or the high-water marks kept in the `meta` table when the
largest rows are gone. A commit that deletes messages or deliveries at or above the mark it
knows raises the mark in the same transaction (one statement per batch, not a trigger per
row); a session's cascade and `trim_journal` raise it from the rows they remove. Held QoS 2
messages raise it when put, not when released: the broker holds them before they have an
id, so their releases (one per QoS 2 message) write nothing but the delete.

Damage. `load` first runs `PRAGMA quick_check` (a read of the whole file: about a second
per GB, paid once per start), because damage in a page that loading does not read (the
journal's, an index's) would otherwise surface later, in a reader. If SQLite calls the file
corrupt or not a database while opening, checking or loading, the file (with its `-wal` and
`-shm`) is renamed to `telemq.db.corrupt-<UTC time>` for an operator to examine, a new store
takes its place, and every row that can still be read from the damaged file is copied into
it (salvage: ranges of rows in unreadable pages are skipped and each skipped range is
recorded in `quarantine`; the held QoS 2 messages, a table without rowids, are read whole).
The id counters are kept as far as they can be read. A row that decodes badly (invalid JSON
`data`, qos out of range, text that is not UTF-8, a delivery whose message is gone) is moved
to the `quarantine` table with the reason and the rest loads. Both are logged on the
`telemq.store` logger.

Readers. WAL lets `open_journal_reader` connections read while the broker commits; neither
blocks the other. A reader that keeps one read transaction open for long stops checkpoints
from reclaiming the WAL, so readers should read in bounded chunks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import chain, groupby
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from . import _codec
from ._codec import COLUMNS, BadRecord, Row
from .base import (
    JOURNAL_CHUNK_ROWS,
    JOURNAL_FIELDS,
    ConsumerOffset,
    JournalRecord,
    Op,
    Store,
    StoreError,
    StoreState,
    StoreStats,
    SyncMode,
    WriteBatch,
)

log = logging.getLogger("telemq.store")

DB_FILENAME = "telemq.db"
SCHEMA_VERSION = 6
# 2: `incoming` keyed by (client_id, packet_id) itself (WITHOUT ROWID).
# 3: `incoming.released`: released QoS 2 messages are remembered (`_add_released_column`).
# 4: MQTT 5.0: `properties` in messages, retained, incoming; `expiry_at` in messages,
#    incoming (`_add_columns`).
# 5: `journal.properties` (`_add_columns`).
# 6: `journal.origin`, the broker a publication was made at (`_add_columns`).
_BUSY_TIMEOUT_S = 5.0  # only another writer (an operator's sqlite3 shell) can make us wait
_CORRUPTION = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_WAL_SIZE_LIMIT = 64 << 20
_ROW_LOG_LIMIT = 20  # per load: beyond this, quarantined rows are only counted

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
# the broker the publication was made at; NULL in rows older than schema 6. Last in each
# table, in the order in which `_add_columns` adds them to an older file.
_SCHEMA = f"""
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
-- Gone since incoming ids raise the mark when put (`_Plan.mark`); kept out of old files.
DROP TRIGGER IF EXISTS incoming_replaced;
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
"""


def _insert(table: str, verb: str) -> str:
    columns = COLUMNS[table]
    marks = ", ".join("?" * len(columns))
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({marks})"


# A commit writes table by table (lane by lane), keeping the batch's order within each
# table. Ops on different tables commute (no foreign keys; the only shared row, a high-water
# mark in `meta`, is only ever raised), so the result is the batch's, and the broker's
# interleaved "message, delivery" per publication becomes a few multi-row statements (the
# journal rows travel apart, flat: `_write_journal`).
_SESSIONS, _SUBSCRIPTIONS, _RETAINED, _MESSAGES, _DELIVERIES, _INCOMING = range(6)

_RAISE_MARK = "UPDATE meta SET value = MAX(value, ?) WHERE key = ?"


def _raise_mark_from(key: str, table: str, column: str, where: str) -> str:
    """SQL raising a high-water mark past the rows a delete is about to remove."""
    return (
        f"UPDATE meta SET value = MAX(value, (SELECT IFNULL(MAX({column}), 0) + 1"
        f" FROM {table} WHERE {where})) WHERE key = '{key}'"
    )


class _Plan(NamedTuple):
    """How `commit` writes one kind of op."""

    statements: dict[int, tuple[str, ...]]  # per lane, run in order with the same parameters
    build: Callable[[Any], Row] | None  # row builder; None: the op's args are the parameters
    counted: int  # change of the message count per row the (last) statement affects
    mark: tuple[str, int] | None  # meta key these ids may have to raise, and the id's column


_BY_CLIENT = "client_id = ?"
_PLAN: dict[Op, _Plan] = {
    Op.PUT_SESSION: _Plan(
        {_SESSIONS: (_insert("sessions", "INSERT OR REPLACE"),)}, _codec.session_row, 0, None
    ),
    Op.DELETE_SESSION: _Plan(
        {
            _SESSIONS: ("DELETE FROM sessions WHERE client_id = ?",),
            _SUBSCRIPTIONS: ("DELETE FROM subscriptions WHERE client_id = ?",),
            _DELIVERIES: (
                _raise_mark_from("next_delivery_id", "deliveries", "delivery_id", _BY_CLIENT),
                "DELETE FROM deliveries WHERE client_id = ?",
            ),
            _INCOMING: ("DELETE FROM incoming WHERE client_id = ?",),
        },
        None,
        0,
        None,
    ),
    Op.PUT_SUBSCRIPTION: _Plan(
        {_SUBSCRIPTIONS: (_insert("subscriptions", "INSERT OR REPLACE"),)},
        _codec.subscription_row,
        0,
        None,
    ),
    Op.DELETE_SUBSCRIPTION: _Plan(
        {_SUBSCRIPTIONS: ("DELETE FROM subscriptions WHERE client_id = ? AND key = ?",)},
        None,
        0,
        None,
    ),
    Op.PUT_RETAINED: _Plan(
        {_RETAINED: (_insert("retained", "INSERT OR REPLACE"),)}, _codec.retained_row, 0, None
    ),
    Op.DELETE_RETAINED: _Plan(
        {_RETAINED: ("DELETE FROM retained WHERE sub_point = ? AND topic = ?",)}, None, 0, None
    ),
    # Messages are immutable: putting an id that is already stored keeps the stored one.
    # (Not INSERT OR IGNORE: that would also skip rows that violate a CHECK.)
    Op.PUT_MESSAGE: _Plan(
        {_MESSAGES: (_insert("messages", "INSERT") + " ON CONFLICT (id) DO NOTHING",)},
        _codec.message_row,
        1,
        None,
    ),
    Op.DELETE_MESSAGE: _Plan(
        {_MESSAGES: ("DELETE FROM messages WHERE id = ?",)}, None, -1, ("next_message_id", 0)
    ),
    Op.PUT_DELIVERY: _Plan(
        {_DELIVERIES: (_insert("deliveries", "INSERT OR REPLACE"),)}, _codec.delivery_row, 0, None
    ),
    Op.DELETE_DELIVERY: _Plan(
        {_DELIVERIES: ("DELETE FROM deliveries WHERE delivery_id = ?",)},
        None,
        0,
        ("next_delivery_id", 0),
    ),
    # A held QoS 2 message's id raises the mark when it is put (the broker's are 0: not yet
    # stored as a message), so neither replacing nor deleting a held message has to.
    Op.PUT_INCOMING: _Plan(
        {_INCOMING: (_insert("incoming", "INSERT OR REPLACE"),)},
        _codec.incoming_row,
        0,
        ("next_message_id", 2),
    ),
    Op.DELETE_INCOMING: _Plan(
        {_INCOMING: ("DELETE FROM incoming WHERE client_id = ? AND packet_id = ?",)},
        None,
        0,
        None,
    ),
    Op.RELEASE_INCOMING: _Plan(
        {_INCOMING: ("UPDATE incoming SET released = 1 WHERE client_id = ? AND packet_id = ?",)},
        None,
        0,
        None,
    ),
}


def _lanes_by_op() -> list[tuple[int, ...]]:
    """Indexed by op value: the lanes an op goes to (a list index beats a dict lookup)."""
    lanes: list[tuple[int, ...]] = [()] * (max(Op) + 1)
    for op, plan in _PLAN.items():
        lanes[op] = tuple(plan.statements)
    return lanes


_LANES_OF = _lanes_by_op()
_op_of = itemgetter(0)

# Rows per statement, largest first. `executemany` releases the GIL around every row's
# step; while the event loop thread is busy, taking it back costs up to the switch
# interval each time, so a writer writing row by row crawls exactly when the broker is
# loaded. Multi-row statements take it back once per statement (and bind in C). Deletes
# (a QoS 2 release, an acknowledged delivery) come in smaller runs than journal rows: powers
# of two keep any run to a few statements. A run of up to `_EXACT_ROWS` rows (the batches of
# a light load) is one statement of its exact size, made on first use.
_ROWS_PER_STATEMENT = (512, 256, 128, 64, 32, 16, 8, 4, 2)
_EXACT_ROWS = 32
_CACHED_STATEMENTS = 1024  # every multi-row form of every statement stays prepared


# Tables without a rowid, and the key that names one of their rows instead.
_ROW_KEYS = {"incoming": ("client_id", "packet_id")}

# An INSERT's value list, whose terms may be function calls (`_JournalStatements`).
_VALUES = re.compile(r" VALUES (\((?:[^()]|\([^()]*\))*\))")
# `FROM table WHERE a = ? [AND b = ?]` as DELETEs and high-water-mark UPDATEs write it.
_KEYED = re.compile(r"FROM (\w+) WHERE (\w+ = \?(?: AND \w+ = \?)*)(?=\)|$)")


def _multi_row(sql: str, rows: int) -> str | None:
    """`sql` applied to `rows` parameter rows at once, or None when it has no such form.

    An INSERT ... VALUES (...) [suffix] gets `rows` value lists. A statement keyed by
    `FROM t WHERE a = ? [AND b = ?]` gets `a IN (?, ...)`, or for a composite key a join
    with a VALUES list (SQLite scans the table for a row-value IN over VALUES; the join
    searches its index). Within a run of one kind of op the two forms mean the same: a
    delete or a raise of a maximum does not depend on the order of its rows.
    """
    listed = _VALUES.search(sql)
    if listed is not None and sql.startswith("INSERT"):
        start, end = listed.span(1)
        return sql[:start] + ", ".join([listed.group(1)] * rows) + sql[end:]
    keyed = _KEYED.search(sql)
    if keyed is None or sql.count("?") != keyed.group(2).count("?"):
        return None
    table = keyed.group(1)
    columns = [term.partition(" = ")[0] for term in keyed.group(2).split(" AND ")]
    if len(columns) > 1 and table in _ROW_KEYS:
        return None  # no rowid to join on, and a row-value IN scans the table: stepped
    if len(columns) == 1:
        where = f"{columns[0]} IN ({', '.join('?' * rows)})"
    else:
        values = ", ".join([f"({', '.join('?' * len(columns))})"] * rows)
        join = " AND ".join(f"t.{c} = k.column{i}" for i, c in enumerate(columns, 1))
        where = f"rowid IN (SELECT t.rowid FROM (VALUES {values}) AS k JOIN {table} AS t ON {join})"
    return f"{sql[: keyed.start()]}FROM {table} WHERE {where}{sql[keyed.end() :]}"


_MULTI_ROW: dict[str, tuple[tuple[int, str], ...]] = {
    sql: tuple((rows, multi) for rows in _ROWS_PER_STATEMENT if (multi := _multi_row(sql, rows)))
    for plan in _PLAN.values()
    for statements in plan.statements.values()
    for sql in statements
    if _multi_row(sql, 1) is not None
}


_EXACT: dict[tuple[str, int], str] = {}  # (statement, rows) -> its form for exactly that many
# Deletes by a composite key (a retained topic, a subscription) join a VALUES list: building
# the join costs more than stepping the one-row statement per row, so runs of up to
# `_EXACT_ROWS` rows are stepped (measured: 8 us against 12 us for 10 rows). Larger runs,
# which a busy loop leaves to the writer thread, join: there the statement count is what
# matters. (Held QoS 2 messages have no rowid to join on: always stepped, see `_multi_row`.)
_JOINED = frozenset(sql for sql, variants in _MULTI_ROW.items() if " JOIN " in variants[0][1])


def _exact(sql: str, rows: int) -> str:
    multi = _EXACT.get((sql, rows))
    if multi is None:
        multi = _multi_row(sql, rows)
        assert multi is not None  # only asked for statements with multi-row forms
        _EXACT[sql, rows] = multi
    return multi


def _write_rows(conn: sqlite3.Connection, sql: str, params: list[Any]) -> int:
    """Run `sql` once per parameter row, in order; returns the number of rows changed."""
    variants = _MULTI_ROW.get(sql)
    end = len(params)
    if variants is None or end < 2:
        return conn.executemany(sql, params).rowcount
    if end <= _EXACT_ROWS:
        if sql in _JOINED:
            return conn.executemany(sql, params).rowcount
        return conn.execute(_exact(sql, end), list(chain.from_iterable(params))).rowcount
    changed = 0
    start = 0
    for rows, multi in variants:
        while end - start >= rows:
            flat = list(chain.from_iterable(params[start : start + rows]))
            changed += conn.execute(multi, flat).rowcount
            start += rows
    if start < end:
        changed += conn.executemany(sql, params[start:]).rowcount
    return changed


# No properties (0, `JournalRow`) go in as NULL: in SQL, as the rows are bound flat. The
# rows of this broker's own publications do not bind their origin: the statement holds
# the store's name (`_JournalStatements`), so the column costs the writer nothing per row
# (binding is done holding the GIL). Rows of publications made elsewhere bind it.
_INSERT_FOREIGN = _insert("journal", "INSERT").removesuffix("?, ?)") + "NULLIF(?, 0), ?)"


class _JournalStatements(NamedTuple):
    """The INSERTs of this store's own journal rows, its name written in (NULL: none)."""

    single: str
    # Journal rows come by the thousand under load. While the event loop keeps the GIL
    # busy, the writer gets it back once per statement, after up to a switch interval (see
    # `telemq.broker.tuning.SWITCH_INTERVAL`): to keep up it must insert many rows a
    # statement. A sealed chunk (`WriteBatch.seal_journal`, 20,480 parameters: within
    # SQLite's default limit of 32,766) is one statement as it is; the loose rows after it
    # take a few more.
    runs: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, origin: str) -> _JournalStatements:
        # As hex: any name is safe in SQL text, and `_multi_row` reads the value list.
        literal = f"CAST(x'{origin.encode('utf-8').hex()}' AS TEXT)" if origin else "NULL"
        single = _INSERT_FOREIGN.removesuffix("?)") + literal + ")"
        runs = tuple(
            (rows * JOURNAL_FIELDS, _multi_row(single, rows) or single)
            for rows in (JOURNAL_CHUNK_ROWS, 512, 128, 32, 8, 2, 1)
        )
        return cls(single, runs)


def _write_journal(
    conn: sqlite3.Connection, batch: WriteBatch, statements: _JournalStatements
) -> None:
    """Insert a batch's journal rows (given flat), a few statements per batch."""
    single = statements.single
    for values in batch.journal_values():
        end = len(values)
        if end <= _EXACT_ROWS * JOURNAL_FIELDS:
            rows = end // JOURNAL_FIELDS
            conn.execute(single if rows == 1 else _exact(single, rows), values)
            continue
        start = 0
        for width, sql in statements.runs:
            while end - start >= width:
                conn.execute(sql, values if width == end else values[start : start + width])
                start += width
    if batch.journal_foreign:
        conn.executemany(_INSERT_FOREIGN, batch.journal_foreign)


_READ_JOURNAL = (
    f"SELECT {', '.join(COLUMNS['journal'])} FROM journal"
    " WHERE seq >= ? AND seq < ? ORDER BY seq LIMIT ?"
)
# Load order: what each table is sorted by, so both stores return the same lists.
_LOAD_ORDER = {
    "sessions": "client_id",
    "subscriptions": "client_id, key",
    "retained": "sub_point, topic",
    "messages": "id",
    "deliveries": "delivery_id",
    "incoming": "client_id, packet_id",
}


def _is_corruption(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _CORRUPTION


def _now_us() -> int:
    return time.time_ns() // 1000


class _DamagedPages(sqlite3.DatabaseError):
    """`quick_check` found damage that reading the tables may not."""

    sqlite_errorcode = sqlite3.SQLITE_CORRUPT


def _check_pages(conn: sqlite3.Connection) -> None:
    """Raise `_DamagedPages` if the file's structure is damaged. A row that breaks a
    constraint is not structural damage: loading quarantines that row alone."""
    problems = [
        str(row[0])
        for row in conn.execute("PRAGMA quick_check(20)")
        if row[0] != "ok" and not str(row[0]).startswith(_ROW_LEVEL_PROBLEMS)
    ]
    if problems:
        raise _DamagedPages("; ".join(problems))


_ROW_LEVEL_PROBLEMS = ("CHECK constraint failed", "NULL value in", "NOT NULL constraint")


def _text_or_bytes(raw: bytes) -> str | bytes:
    """Salvage text factory: text as it is, invalid UTF-8 kept as bytes for the row decoder
    to quarantine."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


_SALVAGE_TABLES = tuple(COLUMNS)  # the counters in `meta` are salvaged on their own
_SALVAGE_GIVE_UP = 64  # an unreadable rowid range this small is skipped, not split further


def _copy_rows(
    conn: sqlite3.Connection,
    table: str,
    insert: str,
    rows: list[Any],
    where: dict[str, Any],
    skipped: list[tuple[str, str, str]],
) -> int:
    """Insert salvaged rows; those that break the schema's constraints are counted in
    `skipped` (under `where` they were read). Returns how many were copied."""
    before = conn.total_changes
    conn.executemany(insert, rows)
    kept = conn.total_changes - before
    if kept < len(rows):
        skipped.append(
            (
                table,
                json.dumps({**where, "rows": len(rows) - kept}),
                "rows that break the schema's constraints",
            )
        )
    return kept


def _salvage_rows(source: Path, conn: sqlite3.Connection) -> tuple[int, list[tuple[str, str, str]]]:
    """Copy every readable row of the damaged file `source` into `conn` (in a transaction
    the caller commits). Returns (rows copied, quarantine entries for what was skipped);
    a file that is not a database at all yields nothing more to record."""
    try:
        reader = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0, []
    try:
        reader.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.Error:
        reader.close()
        return 0, []
    reader.text_factory = _text_or_bytes
    copied = 0
    skipped: list[tuple[str, str, str]] = []
    try:
        for table in _SALVAGE_TABLES:
            try:
                columns = _columns_in(reader, table) or COLUMNS[table]
            except sqlite3.Error:
                columns = COLUMNS[table]  # reading it below says what is wrong
            names = ", ".join(columns)
            marks = ", ".join("?" * len(columns))
            insert = f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({marks})"
            if table in _ROW_KEYS:
                # No rowid to read ranges by (schema 2's `incoming`: a few held messages).
                try:
                    rows = reader.execute(f"SELECT {names} FROM {table}").fetchall()
                except sqlite3.Error as exc:
                    skipped.append((table, json.dumps({"rows": "all"}), f"unreadable: {exc}"))
                    continue
                copied += _copy_rows(conn, table, insert, rows, {"rows": "all"}, skipped)
                continue
            select = f"SELECT {names} FROM {table} WHERE rowid BETWEEN ? AND ?"
            try:
                low, high = reader.execute(f"SELECT MIN(rowid), MAX(rowid) FROM {table}").fetchone()
            except sqlite3.Error as exc:
                skipped.append((table, json.dumps({"rows": "all"}), f"unreadable: {exc}"))
                continue
            if low is None:
                continue
            ranges = [(int(low), int(high))]
            while ranges:
                first, last = ranges.pop()
                try:
                    rows = reader.execute(select, (first, last)).fetchall()
                except sqlite3.Error as exc:
                    if last - first < _SALVAGE_GIVE_UP:
                        skipped.append(
                            (table, json.dumps({"rowids": [first, last]}), f"unreadable: {exc}")
                        )
                    else:
                        middle = (first + last) // 2
                        ranges += [(middle + 1, last), (first, middle)]
                    continue
                copied += _copy_rows(conn, table, insert, rows, {"rowids": [first, last]}, skipped)
    finally:
        reader.close()
    return copied, skipped


def _lenient_text(raw: bytes) -> str:
    """Text factory for re-reading a table that holds invalid UTF-8: keep the bad bytes as
    surrogates so the row decoder can reject that row alone."""
    return raw.decode("utf-8", "surrogateescape")


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _rebuild_incoming(conn: sqlite3.Connection, path: Path) -> None:
    """Schema 1 -> 2: the held QoS 2 messages move to a table keyed by (client_id, packet_id)
    itself. If a row does not fit (only a file edited by hand has such rows), the old table
    stays, which works as well, only slower, and the next start tries again."""
    found = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'incoming'"
    ).fetchone()
    if found is None or "WITHOUT ROWID" in str(found[0]).upper():
        return
    columns = ", ".join(_columns_in(conn, "incoming"))
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TRIGGER IF EXISTS incoming_replaced")
        conn.execute("ALTER TABLE incoming RENAME TO incoming_schema_1")
        conn.execute(_CREATE_INCOMING)
        conn.execute(f"INSERT INTO incoming ({columns}) SELECT {columns} FROM incoming_schema_1")
        conn.execute("DROP TABLE incoming_schema_1")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        SqliteStore._rollback(conn)
        if _is_corruption(exc):
            raise
        log.warning("store %s: held QoS 2 messages stay in their schema 1 table: %s", path, exc)


def _columns_in(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    """The columns of `COLUMNS[table]` that the file's table has (older schemas lack some;
    they take their defaults where rows are copied)."""
    present = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
    return tuple(column for column in COLUMNS[table] if column in present)


def _add_released_column(conn: sqlite3.Connection) -> None:
    """Schema 2 -> 3: held QoS 2 messages gain `released` (0 for every existing row).
    Without the CHECK of a new file's column: SQLite would check every old row against all
    the table's constraints, and one bad row (quarantined at load) would stop the start."""
    if (
        "released" in _columns_in(conn, "incoming")
        or not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'incoming'"
        ).fetchone()
    ):
        return
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ALTER TABLE incoming ADD COLUMN released INTEGER NOT NULL DEFAULT 0")
    conn.execute("COMMIT")


# Schema 4's, 5's and 6's columns, per table, in the order of a new file's tables.
_ADDED_COLUMNS = {
    "messages": (("properties", "BLOB"), ("expiry_at", "REAL")),
    "retained": (("properties", "BLOB"),),
    "incoming": (("properties", "BLOB"), ("expiry_at", "REAL")),
    "journal": (("properties", "BLOB"), ("origin", "TEXT")),
}


def _add_columns(conn: sqlite3.Connection) -> None:
    """Schema 3 -> 4 -> 5 -> 6: stored messages, retained messages and held QoS 2 messages
    gain `properties`, and stored and held messages `expiry_at` (4); the journal gains
    `properties` (5) and `origin` (6). NULL for every existing row (no properties, never
    expires, origin unknown), each
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
        for present in [_columns_in(conn, table)]
        for column, kind in columns
        if column not in present
    ]
    if not missing:
        return
    conn.execute("BEGIN IMMEDIATE")
    for table, column, kind in missing:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    conn.execute("COMMIT")


_NO_MARKS = {"next_seq": 1, "next_message_id": 1, "next_delivery_id": 1}
_MAXIMA = (
    ("next_seq", "SELECT MAX(seq) FROM journal"),
    ("next_message_id", "SELECT MAX(id) FROM messages"),
    (
        "next_message_id",
        "SELECT MAX(message_id) FROM incoming WHERE typeof(message_id) = 'integer'",
    ),
    ("next_delivery_id", "SELECT MAX(delivery_id) FROM deliveries"),
)


def _next_ids(
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


def open_journal_reader(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection to a store's journal (`path`: the data directory or the file).

    WAL readers see a consistent snapshot per transaction and never block the broker's
    commits. Query the `journal` table by `seq` ranges and keep read transactions short.
    """
    file = Path(path)
    if file.is_dir():
        file = file / DB_FILENAME
    if not file.is_file():
        raise StoreError(f"no store file at {file}")
    uri = file.resolve().as_uri() + "?mode=ro"
    try:
        return sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {file} for reading: {exc}") from exc


class SqliteStore(Store):
    """The durable state in one SQLite file; see the module docstring."""

    def __init__(
        self, path: str | os.PathLike[str], sync: SyncMode | str = SyncMode.FULL, origin: str = ""
    ) -> None:
        """`origin`: the broker's name, written as the origin of its own journal rows."""
        self.path = Path(path)
        self.sync = SyncMode(sync)
        self._journal_statements = _JournalStatements.of(origin)
        self._conn: sqlite3.Connection | None = None
        self._unreported = 0  # damaged files set aside that no load() has reported yet
        self._quarantined = 0  # rows in the quarantine table
        self._messages: int | None = None  # message count, kept up to date by commit
        # The `meta` high-water marks as last written by this store (lower is safe: it only
        # costs a redundant update).
        self._marks = dict(_NO_MARKS)
        self._lock = self._take_lock()
        try:
            try:
                self._conn = self._connect()
            except sqlite3.Error as exc:
                if not _is_corruption(exc):
                    raise StoreError(f"cannot open store {self.path}: {exc}") from exc
                self._conn = self._replace_damaged_file(exc)
        except BaseException:
            self._release_lock()
            raise

    # -- Store API ------------------------------------------------------------------------

    def load(self) -> StoreState:
        conn = self._live()
        try:
            try:
                _check_pages(conn)
                state = self._load(conn)
            except sqlite3.Error as exc:
                if not _is_corruption(exc):
                    raise
                self._conn = self._replace_damaged_file(exc)
                state = self._load(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot load store {self.path}: {exc}") from exc
        state.quarantined += self._unreported
        self._unreported = 0
        return state

    def commit(self, batch: WriteBatch) -> None:
        conn = self._live()
        if not batch:
            return
        lanes: list[list[tuple[Op, tuple[Any, ...]]]] = [[], [], [], [], [], []]
        for entry in batch.ops:
            for lane in _LANES_OF[entry[0]]:
                lanes[lane].append(entry)
        message_delta = 0
        raised: dict[str, int] = {}  # high-water marks this batch must persist
        try:
            conn.execute("BEGIN IMMEDIATE")
            for lane, entries in enumerate(lanes):
                if not entries:
                    continue
                for op, run in groupby(entries, _op_of):
                    statements, build, counted, mark = _PLAN[op]
                    if build is None:
                        params = [args for _, args in run]
                    else:
                        params = [build(args[0]) for _, args in run]
                    for sql in statements[lane]:
                        changed = _write_rows(conn, sql, params)
                    if counted:
                        message_delta += counted * changed
                    if mark is not None:
                        key, column = mark
                        top = max(map(itemgetter(column), params)) + 1
                        if top > self._marks[key] and top > raised.get(key, 0):
                            raised[key] = top
            _write_journal(conn, batch, self._journal_statements)
            if raised:
                conn.executemany(_RAISE_MARK, [(top, key) for key, top in raised.items()])
            syncing = time.perf_counter()
            conn.execute("COMMIT")
            self.last_sync_seconds = time.perf_counter() - syncing
        except Exception as exc:
            self._rollback(conn)
            raise StoreError(f"commit failed, nothing applied: {exc}") from exc
        except BaseException:
            self._rollback(conn)
            raise
        if self._messages is not None:
            self._messages += message_delta
        self._marks.update(raised)

    def read_journal(
        self, start_seq: int, end_seq: int, limit: int | None = None
    ) -> list[JournalRecord]:
        conn = self._live()
        bound = -1 if limit is None else max(limit, 0)
        try:
            rows = conn.execute(_READ_JOURNAL, (start_seq, end_seq, bound)).fetchall()
        except (sqlite3.Error, OverflowError) as exc:
            raise StoreError(f"cannot read the journal: {exc}") from exc
        return list(map(_codec.journal_from_trusted_row, rows))

    def trim_journal(self, before_seq: int) -> int:
        conn = self._live()
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Remember where seq stands before its largest rows can go: it must not restart.
            conn.execute(
                "UPDATE meta SET value = MAX(value,"
                " (SELECT IFNULL(MAX(seq), 0) + 1 FROM journal WHERE seq < ?))"
                " WHERE key = 'next_seq'",
                (before_seq,),
            )
            deleted: int = conn.execute("DELETE FROM journal WHERE seq < ?", (before_seq,)).rowcount
            conn.execute("COMMIT")
        except (sqlite3.Error, OverflowError) as exc:
            self._rollback(conn)
            raise StoreError(f"cannot trim the journal: {exc}") from exc
        return deleted

    def journal_seq_since(self, ts_us: int) -> int | None:
        conn = self._live()
        try:
            row = conn.execute(
                "SELECT seq FROM journal WHERE ts_us >= ? ORDER BY seq LIMIT 1", (ts_us,)
            ).fetchone()
        except (sqlite3.Error, OverflowError) as exc:
            raise StoreError(f"cannot read the journal: {exc}") from exc
        return None if row is None else int(row[0])

    def put_consumer_offset(self, offset: ConsumerOffset) -> None:
        self._write(
            "INSERT OR REPLACE INTO consumers (name, owner, committed_seq, running, updated_us)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                offset.name,
                offset.owner,
                offset.committed_seq,
                int(offset.running),
                offset.updated_us,
            ),
        )

    def delete_consumer_offset(self, name: str) -> bool:
        return self._write("DELETE FROM consumers WHERE name = ?", (name,)) > 0

    def consumer_offsets(self) -> list[ConsumerOffset]:
        conn = self._live()
        try:
            rows = conn.execute(
                "SELECT name, owner, committed_seq, running, updated_us FROM consumers"
                " ORDER BY name"
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read consumer offsets: {exc}") from exc
        return [ConsumerOffset(n, o, c, bool(r), u) for n, o, c, r, u in rows]

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        """One statement in a transaction of its own; the rows it changed."""
        conn = self._live()
        try:
            conn.execute("BEGIN IMMEDIATE")
            changed: int = conn.execute(sql, params).rowcount
            conn.execute("COMMIT")
        except (sqlite3.Error, OverflowError) as exc:
            self._rollback(conn)
            raise StoreError(f"cannot write consumer offsets: {exc}") from exc
        return changed

    def stats(self) -> StoreStats:
        """Sizes; `journal_rows` is `last - first + 1`, exact while seq has no gaps (design
        §8), and `deliveries` counts the client index (cheap, but linear in queued rows)."""
        conn = self._live()
        try:
            # One statement, one snapshot: a commit between two would pair a MIN of an
            # empty journal with the MAX of a full one. Subqueries, so that each is one
            # b-tree lookup (SQLite scans for MIN and MAX side by side).
            first, last = conn.execute(
                "SELECT (SELECT MIN(seq) FROM journal), (SELECT MAX(seq) FROM journal)"
            ).fetchone()
            deliveries = conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]
            if self._messages is None:
                self._messages = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read store sizes: {exc}") from exc
        return StoreStats(
            bytes_on_disk=_file_size(str(self.path)) + _file_size(f"{self.path}-wal"),
            journal_rows=0 if last is None else last - first + 1,
            journal_first_seq=first or 0,
            journal_last_seq=last or 0,
            messages=self._messages,
            deliveries=deliveries,
            quarantined=self._quarantined,
        )

    def close(self) -> None:
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                conn.close()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot close store {self.path}: {exc}") from exc
        finally:
            self._release_lock()

    def _take_lock(self) -> int | None:
        """Hold `<store>.lock` while open: two brokers writing one store would refuse each
        other's writes (the journal's sequence numbers collide), so the second one is
        refused at start instead. Readers (the pipeline) do not take it."""
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks, the store is not locked there
            return None
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StoreError(
                f"store {self.path} is in use by another process (pid {holder}): one broker"
                " per data directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        return fd

    def _release_lock(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)  # closing it releases the lock

    # -- opening --------------------------------------------------------------------------

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("store is closed")
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=_BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=_CACHED_STATEMENTS,
        )
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("store %s: no WAL mode (got %s); readers may block", self.path, mode)
            conn.execute(f"PRAGMA synchronous={self.sync.name}")
            # After a burst, checkpoints truncate the WAL back to this size instead of keeping it.
            conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.path} has schema version {version}, newer than this"
                    f" telemq understands ({SCHEMA_VERSION}); refusing to touch it"
                )
            _rebuild_incoming(conn, self.path)
            _add_released_column(conn)
            _add_columns(conn)
            conn.executescript(_SCHEMA)
            self._quarantined = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
            self._marks = self._read_marks(conn)
        except BaseException:
            self._rollback(conn)
            conn.close()
            raise
        return conn

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.exception("rollback failed")

    def _replace_damaged_file(self, exc: sqlite3.Error) -> sqlite3.Connection:
        """Move the damaged file aside, start an empty one, and record that in it."""
        counters = self._salvage_counters()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(sqlite3.Error):  # it is damaged; the file is what matters
                conn.close()
        aside = self._aside_name()
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                os.replace(source, f"{aside}{suffix}")
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            copied, skipped = _salvage_rows(aside, conn)
            conn.executemany(_RAISE_MARK, counters)
            now = _now_us()
            conn.executemany(
                "INSERT INTO quarantine (table_name, row_json, reason, ts_us) VALUES (?, ?, ?, ?)",
                [
                    ("*", json.dumps({"moved_to": aside.name}), str(exc), now),
                    *((table, what, why, now) for table, what, why in skipped),
                ],
            )
            conn.execute("COMMIT")
        except sqlite3.Error as again:
            raise StoreError(f"cannot start a new store at {self.path}: {again}") from again
        log.error(
            "store %s is damaged (%s): moved it to %s; a new store holds the %d rows that "
            "could be read, %d unreadable ranges are recorded in quarantine",
            self.path,
            exc,
            aside.name,
            copied,
            len(skipped),
        )
        self._quarantined += 1 + len(skipped)
        self._unreported += 1 + len(skipped)
        self._messages = None
        self._marks = self._read_marks(conn)
        return conn

    def _aside_name(self) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        return aside

    def _salvage_counters(self) -> list[tuple[int, str]]:
        """Best effort: the id counters of a damaged file, so a new store does not reuse ids."""
        try:
            reader = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        except sqlite3.Error:
            return []
        try:
            try:
                marks = self._read_marks(reader)
            except sqlite3.Error:
                marks = dict(_NO_MARKS)
            counters = _next_ids(reader, marks, tolerant=True)
        finally:
            reader.close()
        return [(value, key) for key, value in counters.items()]

    # -- loading --------------------------------------------------------------------------

    def _rows(self, conn: sqlite3.Connection, table: str) -> list[Row]:
        """All rows of `table` in load order, each with what names it appended (its rowid,
        or its key in a table without one): `_set_aside` deletes bad rows by it."""
        columns = ", ".join(COLUMNS[table])
        names = ", ".join(_ROW_KEYS.get(table, ("rowid",)))
        sql = f"SELECT {columns}, {names} FROM {table} ORDER BY {_LOAD_ORDER[table]}"
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
        conn.text_factory = _lenient_text  # some text is not UTF-8: find out which rows
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.text_factory = str

    def _load(self, conn: sqlite3.Connection) -> StoreState:
        bad: list[tuple[str, Row, str]] = []

        def decode(table: str, from_row: Callable[[Sequence[object]], Any]) -> list[Any]:
            records = []
            for row in self._rows(conn, table):
                try:
                    records.append(from_row(row))
                except BadRecord as exc:
                    bad.append((table, row, str(exc)))
            return records

        state = StoreState(
            sessions=decode("sessions", _codec.session_from_row),
            subscriptions=decode("subscriptions", _codec.subscription_from_row),
            retained=decode("retained", _codec.retained_from_row),
            messages={m.id: m for m in decode("messages", _codec.message_from_row)},
            incoming=decode("incoming", _codec.incoming_from_row),
        )
        deliveries = decode("deliveries", _codec.delivery_from_row)
        state.deliveries, dangling, orphans = _codec.link_deliveries(state.messages, deliveries)
        for d in dangling:
            row = (*_codec.delivery_row(d), d.delivery_id)
            bad.append(("deliveries", row, f"message {d.message_id} is missing"))
        for message_id in orphans:
            del state.messages[message_id]
        counters = _next_ids(conn, self._read_marks(conn))  # rows set aside count too
        if bad or orphans or counters != self._marks:
            self._set_aside(conn, bad, orphans, counters)
        state.next_seq = counters["next_seq"]
        state.next_message_id = counters["next_message_id"]
        state.next_delivery_id = counters["next_delivery_id"]
        state.quarantined = len(bad)
        self._messages = len(state.messages)
        return state

    @staticmethod
    def _read_marks(conn: sqlite3.Connection) -> dict[str, int]:
        marks = dict(_NO_MARKS)
        for key, value in conn.execute("SELECT key, value FROM meta"):
            if key in marks and isinstance(value, int):
                marks[key] = value
        return marks

    def _set_aside(
        self,
        conn: sqlite3.Connection,
        bad: list[tuple[str, Row, str]],
        orphans: list[int],
        counters: dict[str, int],
    ) -> None:
        """Move bad rows to `quarantine`, drop orphan messages and persist the counters (so
        that the rows going away cannot lower them), in one transaction."""
        for table, _, reason in bad[:_ROW_LOG_LIMIT]:
            log.warning("quarantined a row of %s: %s", table, reason)
        if len(bad) > _ROW_LOG_LIMIT:
            log.warning("quarantined %d more rows", len(bad) - _ROW_LOG_LIMIT)
        if orphans:
            log.info("dropped %d stored messages that no delivery references", len(orphans))
        now = _now_us()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_RAISE_MARK, [(value, key) for key, value in counters.items()])
            conn.executemany(
                "INSERT INTO quarantine (table_name, row_json, reason, ts_us) VALUES (?, ?, ?, ?)",
                [(table, _codec.row_json(table, row), reason, now) for table, row, reason in bad],
            )
            for table, row, _ in bad:
                names = _ROW_KEYS.get(table, ("rowid",))
                where = " AND ".join(f"{name} IS ?" for name in names)
                conn.execute(f"DELETE FROM {table} WHERE {where}", row[-len(names) :])
            conn.executemany("DELETE FROM messages WHERE id = ?", [(m,) for m in orphans])
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        self._marks = counters
        self._quarantined += len(bad)
