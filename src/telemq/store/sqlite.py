"""`SqliteStore`: the default durable store, one SQLite file in WAL mode (stdlib `sqlite3`).

Theory of operation
-------------------
The store is the broker's `Store` over one file. This module opens it (one connection,
the `<store>.lock` file held against a second broker, the file's schema brought up to date
by `sqlite_schema.migrate`), and implements the interface: `load` at start-up, `commit` of
each batch in one transaction (the statements are planned in sqlite_writes.py), the journal
(read, trimmed, a seq by time) and the journal service's consumer offsets. Any error rolls
back and raises `StoreError`.

Identifiers are never reused: `load` returns counters one past the largest id a committed
batch named, kept in the `meta` table when the largest rows are gone (sqlite_schema.py).

Damage is never a reason not to start: a corrupt file is set aside and what can be read of
it salvaged into a new one, and a row that does not decode is quarantined, not loaded
(sqlite_salvage.py).

Readers. WAL lets `open_journal_reader` connections read while the broker commits; neither
blocks the other. A reader that keeps one read transaction open for long stops checkpoints
from reclaiming the WAL, so readers should read in bounded chunks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from . import _codec
from ._codec import COLUMNS, Row
from .base import (
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
from .sqlite_salvage import (
    check_pages,
    move_aside,
    quarantine_rows,
    salvage_counters,
    salvage_into,
)
from .sqlite_schema import (
    NO_MARKS,
    RAISE_MARK,
    ROW_KEYS,
    SCHEMA_VERSION,
    is_corruption,
    migrate,
    next_ids,
    read_marks,
    rollback,
)
from .sqlite_writes import (
    CACHED_STATEMENTS,
    LANES_OF,
    PLAN,
    JournalStatements,
    op_of,
    write_journal,
    write_rows,
)

__all__ = ["DB_FILENAME", "SqliteStore", "open_journal_reader"]

log = logging.getLogger("telemq.store")

DB_FILENAME = "telemq.db"
_BUSY_TIMEOUT_S = 5.0  # only another writer (an operator's sqlite3 shell) can make us wait
_WAL_SIZE_LIMIT = 64 << 20

_READ_JOURNAL = (
    f"SELECT {', '.join(COLUMNS['journal'])} FROM journal"
    " WHERE seq >= ? AND seq < ? ORDER BY seq LIMIT ?"
)


def _lenient_text(raw: bytes) -> str:
    """Text factory for re-reading a table that holds invalid UTF-8: keep the bad bytes as
    surrogates so the row decoder can reject that row alone."""
    return raw.decode("utf-8", "surrogateescape")


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


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
        self._journal_statements = JournalStatements.of(origin)
        self._conn: sqlite3.Connection | None = None
        self._unreported = 0  # damaged files set aside that no load() has reported yet
        self._quarantined = 0  # rows in the quarantine table
        self._messages: int | None = None  # message count, kept up to date by commit
        # The `meta` high-water marks as last written by this store (lower is safe: it only
        # costs a redundant update).
        self._marks = dict(NO_MARKS)
        self._lock = self._take_lock()
        try:
            try:
                self._conn = self._connect()
            except sqlite3.Error as exc:
                if not is_corruption(exc):
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
                check_pages(conn)
                state = self._load(conn)
            except sqlite3.Error as exc:
                if not is_corruption(exc):
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
            for lane in LANES_OF[entry[0]]:
                lanes[lane].append(entry)
        message_delta = 0
        raised: dict[str, int] = {}  # high-water marks this batch must persist
        try:
            conn.execute("BEGIN IMMEDIATE")
            for lane, entries in enumerate(lanes):
                if not entries:
                    continue
                for op, run in groupby(entries, op_of):
                    statements, build, counted, mark = PLAN[op]
                    if build is None:
                        params = [args for _, args in run]
                    else:
                        params = [build(args[0]) for _, args in run]
                    for sql in statements[lane]:
                        changed = write_rows(conn, sql, params)
                    if counted:
                        message_delta += counted * changed
                    if mark is not None:
                        key, column = mark
                        top = max(map(itemgetter(column), params)) + 1
                        if top > self._marks[key] and top > raised.get(key, 0):
                            raised[key] = top
            write_journal(conn, batch, self._journal_statements)
            if raised:
                conn.executemany(RAISE_MARK, [(top, key) for key, top in raised.items()])
            syncing = time.perf_counter()
            conn.execute("COMMIT")
            self.last_sync_seconds = time.perf_counter() - syncing
        except Exception as exc:
            rollback(conn)
            raise StoreError(f"commit failed, nothing applied: {exc}") from exc
        except BaseException:
            rollback(conn)
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
            rollback(conn)
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
            rollback(conn)
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
            cached_statements=CACHED_STATEMENTS,
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
            migrate(conn, self.path)
            self._quarantined = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
            self._marks = read_marks(conn)
        except BaseException:
            rollback(conn)
            conn.close()
            raise
        return conn

    def _replace_damaged_file(self, exc: sqlite3.Error) -> sqlite3.Connection:
        """Move the damaged file aside, start an empty one, and record that in it."""
        counters = salvage_counters(self.path)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(sqlite3.Error):  # it is damaged; the file is what matters
                conn.close()
        aside = move_aside(self.path)
        try:
            conn = self._connect()
            copied, skipped = salvage_into(conn, aside, str(exc), counters)
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
        self._marks = read_marks(conn)
        return conn

    # -- loading --------------------------------------------------------------------------

    def _rows(self, conn: sqlite3.Connection, table: str) -> list[Row]:
        """All rows of `table` in load order, each with what names it appended (its rowid,
        or its key in a table without one): `quarantine_rows` deletes bad rows by it."""
        columns = ", ".join(COLUMNS[table])
        names = ", ".join(ROW_KEYS.get(table, ("rowid",)))
        sql = f"SELECT {columns}, {names} FROM {table} ORDER BY {_codec.LOAD_ORDER[table]}"
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
        state, bad, orphans = _codec.decode_state(lambda table: self._rows(conn, table))
        counters = next_ids(conn, read_marks(conn))  # rows set aside count too
        if bad or orphans or counters != self._marks:
            quarantine_rows(conn, bad, orphans, counters)
            self._marks = counters
            self._quarantined += len(bad)
        state.next_seq = counters["next_seq"]
        state.next_message_id = counters["next_message_id"]
        state.next_delivery_id = counters["next_delivery_id"]
        state.quarantined = len(bad)
        self._messages = len(state.messages)
        return state
