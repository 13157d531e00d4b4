"""Damage in the SQLite store's file: finding it, setting the file aside, salvaging rows.

Theory of operation
-------------------
`SqliteStore.load` first runs `check_pages` (`PRAGMA quick_check`, a read of the whole
file: about a second per GB, paid once per start), because damage in a page that loading
does not read (the journal's, an index's) would otherwise surface later, in a reader. If
SQLite calls the file corrupt or not a database while opening, checking or loading, the
store moves the file (with its `-wal` and `-shm`) aside as `telemq.db.corrupt-<UTC time>`
for an operator to examine (`move_aside`), a new store takes its place, and every row that
can still be read from the damaged file is copied into it (`salvage_into`: ranges of rows in
unreadable pages are skipped and each skipped range is recorded in `quarantine`; the held
QoS 2 messages, a table without rowids, are read whole). The id counters are kept as far as
they can be read (`salvage_counters`).

A row that decodes badly (invalid JSON `data`, qos out of range, text that is not UTF-8, a
delivery whose message is gone) is moved to the `quarantine` table with the reason, and the
rest loads (`quarantine_rows`). Both are logged on the `telemq.store` logger.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import _codec
from ._codec import COLUMNS, Row
from .sqlite_schema import (
    NO_MARKS,
    RAISE_MARK,
    ROW_KEYS,
    columns_in,
    next_ids,
    read_marks,
    rollback,
)

log = logging.getLogger("telemq.store")

_ROW_LOG_LIMIT = 20  # per load: beyond this, quarantined rows are only counted
_INSERT_QUARANTINE = (
    "INSERT INTO quarantine (table_name, row_json, reason, ts_us) VALUES (?, ?, ?, ?)"
)


def _now_us() -> int:
    """The time a quarantine row records."""
    return time.time_ns() // 1000


class _DamagedPages(sqlite3.DatabaseError):
    """`quick_check` found damage that reading the tables may not."""

    sqlite_errorcode = sqlite3.SQLITE_CORRUPT


def check_pages(conn: sqlite3.Connection) -> None:
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
                columns = columns_in(reader, table) or COLUMNS[table]
            except sqlite3.Error:
                columns = COLUMNS[table]  # reading it below says what is wrong
            names = ", ".join(columns)
            marks = ", ".join("?" * len(columns))
            insert = f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({marks})"
            if table in ROW_KEYS:
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


def move_aside(path: Path) -> Path:
    """Rename the damaged file `path` (with its `-wal` and `-shm`) to a name of its own,
    which is returned, so that a new store can take its place."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{aside}{suffix}")
    return aside


def salvage_counters(path: Path) -> list[tuple[int, str]]:
    """Best effort: the id counters of a damaged file, so a new store does not reuse ids;
    as (value, key) pairs for `RAISE_MARK`."""
    try:
        reader = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        try:
            marks = read_marks(reader)
        except sqlite3.Error:
            marks = dict(NO_MARKS)
        counters = next_ids(reader, marks, tolerant=True)
    finally:
        reader.close()
    return [(value, key) for key, value in counters.items()]


def salvage_into(
    conn: sqlite3.Connection, aside: Path, reason: str, counters: list[tuple[int, str]]
) -> tuple[int, list[tuple[str, str, str]]]:
    """Fill the new store `conn` from the damaged file `aside`, in one transaction: the rows
    that can be read, the counters, and in `quarantine` the move (for `reason`) and what
    was skipped. Returns (rows copied, the skipped ranges' quarantine entries)."""
    conn.execute("BEGIN IMMEDIATE")
    copied, skipped = _salvage_rows(aside, conn)
    conn.executemany(RAISE_MARK, counters)
    now = _now_us()
    conn.executemany(
        _INSERT_QUARANTINE,
        [
            ("*", json.dumps({"moved_to": aside.name}), reason, now),
            *((table, what, why, now) for table, what, why in skipped),
        ],
    )
    conn.execute("COMMIT")
    return copied, skipped


def quarantine_rows(
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
        conn.executemany(RAISE_MARK, [(value, key) for key, value in counters.items()])
        conn.executemany(
            _INSERT_QUARANTINE,
            [(table, _codec.row_json(table, row), reason, now) for table, row, reason in bad],
        )
        for table, row, _ in bad:
            names = ROW_KEYS.get(table, ("rowid",))
            where = " AND ".join(f"{name} IS ?" for name in names)
            conn.execute(f"DELETE FROM {table} WHERE {where}", row[-len(names) :])
        conn.executemany("DELETE FROM messages WHERE id = ?", [(m,) for m in orphans])
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
