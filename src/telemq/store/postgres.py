"""`PostgresStore`: the broker's durable state in a PostgreSQL database (psycopg 3).

Theory of operation
-------------------
The same contract as `SqliteStore`, over a server: `[store] kind = "postgres"` with a `dsn`
(postgres_connection.py: password, TLS and several hosts are libpq's). Opening the store
connects, takes the store's advisory lock on that connection (a second broker on the same
database is refused: "the store is in use by another broker"), and creates or migrates the
tables (postgres_schema.py; a schema newer than this code is refused). That one connection
is the broker's for as long as the store is open: every commit goes over it, so the lock
and the commits share a fate. If it breaks (the server restarted, the network failed), the
commit raises `StoreError` and the next call connects again, takes the lock again (refused
if another broker took it meanwhile) and goes on.

An elected store (`elected`: the connection on which a broker with `[ha]` won the lock,
docs/ha.md) never connects again: the lock is the leadership, and a new connection is a new
session without it. Once that connection is lost (or a statement fails on a broken one),
every call raises `StoreError` ("lost the connection that holds the leadership") until the
store is closed, so nothing is committed, hence nothing acknowledged, by a broker that is no
longer elected. `check_leadership` asks the server that the connection still holds the lock
(the broker's watchdog calls it between commits). The elected session also asks the server
for TCP keepalives, so that the server releases the lock of a broker whose host vanished
within seconds, and, once the broker serves, for a lease (`hold_lease`: the session's
``idle_session_timeout`` and ``idle_in_transaction_session_timeout``): a broker whose
watchdog falls silent (a network path that swallows packets without resetting anything, a
frozen process) loses its session, and with it the lock, when the lease runs out, however
the TCP connection looks. `abandon` is the broker's side of the same lease: from any thread,
without waiting for the call in progress, it shuts the connection's socket so that a call
stuck on it fails, and the store is lost from then on.

`commit` writes a batch in one transaction, in one round trip in the common case, or as
one ``COPY`` when it is only journal rows (postgres_writes.py), and returns when PostgreSQL
reports the transaction committed. How durable that is comes from ``synchronous_commit``,
which the store sets from `sync` for its own session: `full` is ``on`` (the commit's WAL
is flushed to disk, and to the synchronous standbys the server names, before the commit
returns: nothing acknowledged is lost); `normal` and `off` are ``off`` (the server
acknowledges before the flush: a crash of the database server may lose the last commits,
a crash of the broker never, as the server has them).

`load` returns what `SqliteStore.load` returns for the same history: the rows are decoded by
the shared codec in the same order (keys are ``COLLATE "C"``), deliveries whose message is
gone are set aside in `quarantine` and counted, orphaned messages deleted, and the id
counters are past every id ever committed. The journal, its retention (`trim_journal`,
`journal_seq_since`) and the consumer offsets are plain statements, each its own
transaction.

The store is used from the broker's writer thread, its event loop (small commits) and the
journal service's worker threads; its public methods take turns on the one connection
(`_serialized`), as a transaction spans several of psycopg's calls. `last_sync_seconds` is
the wait for ``COMMIT``: in a batch sent in one round trip, that whole round trip; in a
lone ``COPY``, the whole ``COPY``.

Readers outside the broker (the journal service) open their own connections
(postgres_reader.py); PostgreSQL's MVCC means neither waits for the other.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import psycopg
from psycopg import pq

from . import _codec
from ._codec import COLUMNS, BadRecord, Row
from .base import (
    ConsumerOffset,
    JournalRecord,
    Store,
    StoreError,
    StoreState,
    StoreStats,
    SyncMode,
    WriteBatch,
)
from .postgres_connection import (
    PostgresLocation,
    connect,
    holds_lock,
    one_line,
    take_lock,
)
from .postgres_schema import RAISE_MARK, ROW_KEYS, TABLES, migrate, next_ids, read_marks
from .postgres_writes import (
    COPY_ALONE_ROWS,
    COPY_JOURNAL,
    INSERT_JOURNAL,
    INSERT_JOURNAL_ROWS,
    journal_columns,
    plan,
)

__all__ = ["SYNCHRONOUS_COMMIT", "PostgresStore"]

log = logging.getLogger("telemq.store")

# `sync` -> the session's synchronous_commit (see the module docstring).
SYNCHRONOUS_COMMIT = {SyncMode.FULL: "on", SyncMode.NORMAL: "off", SyncMode.OFF: "off"}
_IDLE = pq.TransactionStatus.IDLE

_READ_JOURNAL = (
    f"SELECT {', '.join(COLUMNS['journal'])} FROM journal"
    " WHERE seq >= %s AND seq < %s ORDER BY seq LIMIT %s"
)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _serialized(
    method: Callable[Concatenate[PostgresStore, _P], _R],
) -> Callable[Concatenate[PostgresStore, _P], _R]:
    """One call at a time on the store's connection: a commit's transaction spans several
    calls of psycopg's, and the broker may ask for sizes on another thread meanwhile."""

    @functools.wraps(method)
    def run(self: PostgresStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return run


def _copy_journal(cur: psycopg.Cursor[Any], rows: list[Row]) -> None:
    """Stream `rows` into the journal with ``COPY`` (postgres_writes.py)."""
    with cur.copy(COPY_JOURNAL) as copy:
        write_row = copy.write_row
        for row in rows:
            write_row(row)


# An elected session's server-side TCP keepalives (a vanished broker's lock is released).
_SERVER_KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '5', false),"
    " set_config('tcp_keepalives_interval', '2', false),"
    " set_config('tcp_keepalives_count', '3', false)"
)
_SIZE = " + ".join(f"pg_total_relation_size('{table}')" for table in TABLES)


class PostgresStore(Store):
    """The durable state in a PostgreSQL database; see the module docstring."""

    def __init__(
        self,
        location: PostgresLocation | str,
        sync: SyncMode | str = SyncMode.FULL,
        origin: str = "",
        *,
        elected: psycopg.Connection[Any] | None = None,
    ) -> None:
        """`location`: the database (a `PostgresLocation`, or a DSN); `origin`: the broker's
        name, written as the origin of its own journal rows; `elected`: a connection that
        holds the store's lock already (a broker with `[ha]`: see the module docstring),
        the store's for good. StoreError when the database cannot be reached, is in use by
        another broker or holds a newer schema."""
        self.location = (
            location if isinstance(location, PostgresLocation) else PostgresLocation(location)
        )
        self.sync = SyncMode(sync)
        self._origin = origin or None
        self._application = f"telemq (broker {origin})" if origin else "telemq"
        self._closed = False
        self._lock = threading.RLock()
        self._quarantined = 0  # rows in the quarantine table
        # The `meta` high-water marks as last written by this store (lower is safe).
        self._marks: dict[str, int] = {}
        self.elected = elected is not None
        self._lost = ""  # why an elected store's connection is gone ("": it is not)
        self._conn: psycopg.Connection[Any] | None = None
        self._conn = self._open(migrating=True, conn=elected)

    # -- the connection -------------------------------------------------------------------

    def _open(
        self, *, migrating: bool = False, conn: psycopg.Connection[Any] | None = None
    ) -> psycopg.Connection[Any]:
        """Connect and lock (unless given an elected `conn`), and (at start) create or
        migrate the tables."""
        if conn is None:
            conn = connect(self.location, application=self._application)
        try:
            if self.elected:
                conn.execute(_SERVER_KEEPALIVES)
            else:
                take_lock(conn)
            conn.execute(
                "SELECT set_config('synchronous_commit', %s, false)",
                (SYNCHRONOUS_COMMIT[self.sync],),
            )
            if migrating:
                migrate(conn)
            row = conn.execute("SELECT count(*) FROM quarantine").fetchone()
            self._quarantined = int(row[0]) if row is not None else 0
            self._marks = read_marks(conn)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(
                f"cannot open the postgres store ({self.location}): {one_line(exc)}"
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _live(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StoreError("store is closed")
        conn = self._conn
        if self._lost:
            raise StoreError(self._lost)
        if conn is None or conn.closed or conn.broken:
            self._conn = None
            if self.elected:
                self._lose(conn, "the connection was closed")
            log.warning("store: connecting to the postgres store (%s) again", self.location)
            conn = self._conn = self._open()
        return conn

    def _lose(self, conn: psycopg.Connection[Any] | None, reason: str) -> NoReturn:
        """An elected store's connection is gone: refuse every call from now on."""
        self._lost = f"lost the connection that holds the leadership: {reason}"
        self._conn = None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        raise StoreError(self._lost)

    def _check_lost(self, conn: psycopg.Connection[Any], exc: BaseException) -> None:
        """After a failed statement: an elected store whose connection broke is lost."""
        if self.elected and (conn.closed or conn.broken):
            self._lose(conn, one_line(exc))

    @property
    def lost(self) -> bool:
        """Whether this elected store lost its connection (and with it the lock)."""
        return bool(self._lost)

    @_serialized
    def hold_lease(self, seconds: float) -> None:
        """Ask the server to end this elected session, releasing the lock, once it has been
        silent (idle, or idle in a transaction) for `seconds` (module docstring)."""
        conn = self._live()
        milliseconds = str(max(int(seconds * 1000), 1))
        try:
            settings = ["idle_in_transaction_session_timeout"]
            if conn.info.server_version >= 140000:  # idle_session_timeout: PostgreSQL 14
                settings.append("idle_session_timeout")
            for setting in settings:
                conn.execute("SELECT set_config(%s, %s, false)", (setting, milliseconds))
        except psycopg.Error as exc:
            self._rollback(conn)
            self._lose(conn, one_line(exc))

    def abandon(self, reason: str) -> None:
        """From any thread, without taking turns: this store is given up (`reason`): every
        call fails from now on, one stuck on its connection at once (its socket is shut
        down), and it never connects again. An elected store whose lease ran out; a broker
        that starts again on the store's state after a failed commit (broker/recovery.py)."""
        if not self._lost:
            what = "lost the connection that holds the leadership" if self.elected else "given up"
            self._lost = f"{what}: {reason}"
        conn = self._conn
        if conn is None or conn.closed:
            return
        with contextlib.suppress(OSError, psycopg.Error):
            stuck = socket.socket(fileno=os.dup(conn.pgconn.socket))
            with stuck:
                stuck.shutdown(socket.SHUT_RDWR)

    @_serialized
    def check_leadership(self) -> None:
        """StoreError unless this elected store's connection still holds the lock."""
        conn = self._live()
        try:
            held = holds_lock(conn)
        except psycopg.Error as exc:
            self._rollback(conn)
            self._lose(conn, one_line(exc))
        if not held:
            self._lose(conn, "the server says the lock is not held")

    def _rollback(self, conn: psycopg.Connection[Any]) -> None:
        """End a failed transaction, if one is open, so the connection can be used again. An
        elected connection that cannot is closed: `_check_lost` then finds it lost."""
        if conn.closed or conn.broken or conn.info.transaction_status == _IDLE:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            if not self.elected:
                log.exception("rollback failed")
                return
            log.warning("rollback failed: %s", one_line(exc))
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # -- Store API ------------------------------------------------------------------------

    @_serialized
    def load(self) -> StoreState:
        conn = self._live()
        try:
            return self._load(conn)
        except psycopg.Error as exc:
            self._rollback(conn)
            self._check_lost(conn, exc)
            raise StoreError(f"cannot load the postgres store: {one_line(exc)}") from exc

    @_serialized
    def commit(self, batch: WriteBatch) -> None:
        conn = self._live()
        if not batch:
            return
        try:
            planned = plan(batch, self._marks, self._origin)
        except (BadRecord, TypeError, ValueError, OverflowError) as exc:
            raise StoreError(f"commit failed, nothing applied: {exc}") from exc
        journal = planned.journal
        try:
            cur = conn.cursor()
            syncing = time.perf_counter()
            if len(journal) >= COPY_ALONE_ROWS and not planned.steps and not planned.raised:
                _copy_journal(cur, journal)  # outside a transaction block: one of its own
            else:
                with conn.pipeline():
                    cur.execute("BEGIN")
                    for sql, params in planned.steps:
                        cur.executemany(sql, params)
                    if planned.raised:
                        cur.executemany(RAISE_MARK, [(v, k) for k, v in planned.raised.items()])
                    if len(journal) == 1:
                        cur.execute(INSERT_JOURNAL, journal[0])
                    elif journal:
                        cur.execute(INSERT_JOURNAL_ROWS, journal_columns(journal))
                    cur.execute("COMMIT")
            self.last_sync_seconds = time.perf_counter() - syncing
        except Exception as exc:
            self._rollback(conn)
            self._check_lost(conn, exc)
            raise StoreError(f"commit failed, nothing applied: {one_line(exc)}") from exc
        except BaseException:
            self._rollback(conn)
            raise
        self._marks.update(planned.raised)

    @_serialized
    def read_journal(
        self, start_seq: int, end_seq: int, limit: int | None = None
    ) -> list[JournalRecord]:
        bound = None if limit is None else max(limit, 0)
        rows = self._query(
            "cannot read the journal", _READ_JOURNAL, (start_seq, end_seq, bound)
        ).fetchall()
        return list(map(_codec.journal_from_trusted_row, rows))

    @_serialized
    def trim_journal(self, before_seq: int) -> int:
        conn = self._live()
        try:
            with conn.transaction():
                # Remember where seq stands before its largest rows can go: it must not restart.
                conn.execute(
                    "UPDATE meta SET value = GREATEST(value,"
                    " (SELECT COALESCE(max(seq), 0) + 1 FROM journal WHERE seq < %s))"
                    " WHERE key = 'next_seq'",
                    (before_seq,),
                )
                deleted = conn.execute("DELETE FROM journal WHERE seq < %s", (before_seq,))
                return max(deleted.rowcount, 0)
        except psycopg.Error as exc:
            self._rollback(conn)
            self._check_lost(conn, exc)
            raise StoreError(f"cannot trim the journal: {one_line(exc)}") from exc

    @_serialized
    def journal_seq_since(self, ts_us: int) -> int | None:
        row = self._query(
            "cannot read the journal",
            "SELECT seq FROM journal WHERE ts_us >= %s ORDER BY seq LIMIT 1",
            (ts_us,),
        ).fetchone()
        return None if row is None else int(row[0])

    @_serialized
    def put_consumer_offset(self, offset: ConsumerOffset) -> None:
        self._query(
            "cannot write consumer offsets",
            "INSERT INTO consumers (name, owner, committed_seq, running, updated_us)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET"
            " owner = EXCLUDED.owner, committed_seq = EXCLUDED.committed_seq,"
            " running = EXCLUDED.running, updated_us = EXCLUDED.updated_us",
            (
                offset.name,
                offset.owner,
                offset.committed_seq,
                int(offset.running),
                offset.updated_us,
            ),
        )

    @_serialized
    def delete_consumer_offset(self, name: str) -> bool:
        cur = self._query(
            "cannot write consumer offsets", "DELETE FROM consumers WHERE name = %s", (name,)
        )
        return cur.rowcount > 0

    @_serialized
    def consumer_offsets(self) -> list[ConsumerOffset]:
        rows = self._query(
            "cannot read consumer offsets",
            "SELECT name, owner, committed_seq, running, updated_us FROM consumers ORDER BY name",
        ).fetchall()
        return [ConsumerOffset(n, o, c, bool(r), u) for n, o, c, r, u in rows]

    @_serialized
    def stats(self) -> StoreStats:
        """Sizes; `journal_rows` is `last - first + 1`, as in SQLite (exact while seq has no
        gaps); `bytes_on_disk` the size of the store's tables and indexes."""
        row = self._query(
            "cannot read store sizes",
            "SELECT (SELECT min(seq) FROM journal), (SELECT max(seq) FROM journal),"
            " (SELECT count(*) FROM deliveries), (SELECT count(*) FROM messages),"
            f" {_SIZE}",
        ).fetchone()
        assert row is not None
        first, last, deliveries, messages, size = row
        return StoreStats(
            bytes_on_disk=int(size),
            journal_rows=0 if last is None else last - first + 1,
            journal_first_seq=first or 0,
            journal_last_seq=last or 0,
            messages=int(messages),
            deliveries=int(deliveries),
            quarantined=self._quarantined,
        )

    @_serialized
    def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()  # ending the session releases the lock

    # -- helpers --------------------------------------------------------------------------

    def _query(self, failure: str, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """One statement (its own transaction); StoreError naming `failure` when it fails."""
        conn = self._live()
        try:
            return conn.execute(sql, params)
        except (psycopg.Error, OverflowError) as exc:
            self._rollback(conn)
            self._check_lost(conn, exc)
            raise StoreError(f"{failure}: {one_line(exc)}") from exc

    # -- loading --------------------------------------------------------------------------

    def _rows(self, conn: psycopg.Connection[Any], table: str) -> list[Row]:
        """All rows of `table` in load order, each with its key appended (to quarantine it)."""
        columns = ", ".join(COLUMNS[table])
        keys = ", ".join(ROW_KEYS[table])
        sql = f"SELECT {columns}, {keys} FROM {table} ORDER BY {_codec.LOAD_ORDER[table]}"
        return conn.execute(sql.encode()).fetchall()

    def _load(self, conn: psycopg.Connection[Any]) -> StoreState:
        with conn.transaction():  # one snapshot of every table
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            state, bad, orphans = _codec.decode_state(lambda table: self._rows(conn, table))
            counters = next_ids(conn, read_marks(conn))  # rows set aside count too
        if bad or orphans or counters != self._marks:
            self._set_aside(conn, bad, orphans, counters)
            self._marks = counters
            self._quarantined += len(bad)
        state.next_seq = counters["next_seq"]
        state.next_message_id = counters["next_message_id"]
        state.next_delivery_id = counters["next_delivery_id"]
        state.quarantined = len(bad)
        return state

    def _set_aside(
        self,
        conn: psycopg.Connection[Any],
        bad: list[tuple[str, Row, str]],
        orphans: list[int],
        counters: dict[str, int],
    ) -> None:
        """In one transaction: move rows that do not decode to `quarantine`, delete orphaned
        messages (garbage, not damage), and write the id counters as marks."""
        now_us = time.time_ns() // 1000
        with conn.transaction():
            for table, row, reason in bad:
                keys = ROW_KEYS[table]
                values = row[len(COLUMNS[table]) :]
                where = " AND ".join(f"{key} = %s" for key in keys)
                conn.execute(f"DELETE FROM {table} WHERE {where}".encode(), values)
                conn.execute(
                    "INSERT INTO quarantine (table_name, row_json, reason, ts_us)"
                    " VALUES (%s, %s, %s, %s)",
                    (table, _codec.row_json(table, row), reason, now_us),
                )
                if len(bad) <= 20:
                    log.warning("quarantined a row of %s: %s", table, reason)
            if orphans:
                conn.execute("DELETE FROM messages WHERE id = ANY(%s)", (orphans,))
            conn.execute(
                "UPDATE meta SET value = GREATEST(value, (%s::jsonb ->> key)::bigint)"
                " WHERE key IN ('next_seq', 'next_message_id', 'next_delivery_id')",
                (json.dumps(counters),),
            )
