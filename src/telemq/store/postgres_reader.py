"""Reading a PostgreSQL store from outside the broker: `PostgresJournalReader`.

Theory of operation
-------------------
The PostgreSQL twin of `JournalReader` (journal_reader.py), with the same methods and the
same answers, so that the journal service and the Arrow encoding (`telemq.journal.arrow`)
read either store alike. It holds a connection of its own, read-only
(``default_transaction_read_only``), which takes no lock: PostgreSQL's MVCC means the
broker's commits never wait for it and it never waits for them. Each call is one statement,
or one ``REPEATABLE READ`` transaction where two statements must see the same rows.

The journal service reads through `PostgresReaderPool`: a pool of such connections
(psycopg_pool), opened at its first read and closed with the HTTP listeners, so that
concurrent HTTP readers share a few connections instead of each request connecting (and
authenticating) anew. A reader on a pooled connection is `PostgresJournalReader.borrowing`
it; its `close` gives it back. Each new pooled connection is made read-only and its schema
checked, as a reader's own, and each is checked (a round trip) as it is handed out, so that
one the server dropped meanwhile is replaced; the pool reads the password file again for
each new connection.
A reader that waits `POOL_WAIT_S` for a connection in vain (the server down, every
connection busy) connects once on its own to learn why, so the error says what libpq says.

`packed` asks the server for one row of aggregates, as the SQLite reader does with
``group_concat``: ``string_agg`` with ``ORDER BY seq`` (so `packed_in_order` is always
true). PostgreSQL's text cannot hold U+0000, so the text columns are aggregated as bytes
(``convert_to(..., 'UTF8')``) with a zero byte between them; payloads and properties are
``bytea`` already.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .base import StoreError
from .journal_reader import JournalRowValues, PackedRange, SubscriptionRow
from .postgres_connection import PostgresLocation, connect, one_line
from .postgres_schema import check_version, schema_version

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["POOL_SIZE", "PostgresJournalReader", "PostgresReaderPool"]

APPLICATION = "telemq journal reader"
POOL_SIZE = 8  # connections of one broker's journal service, at most
POOL_WAIT_S = 10.0  # how long a read waits for one of them
POOL_IDLE_S = 60.0  # an idle connection beyond the first is closed after this


def _text_agg(column: str) -> str:
    return f"string_agg(convert_to({column}, 'UTF8'), '\\x00'::bytea ORDER BY seq)"


_PACKED_SQL = f"""SELECT count(*), min(seq), max(seq),
 string_agg(ts_us::text, ',' ORDER BY seq),
 string_agg((qos * 2 + retain)::text, '' ORDER BY seq),
 {_text_agg("topic")}, {_text_agg("sub_point")}, {_text_agg("client_id")},
 {_text_agg("user_id")}, {_text_agg("coalesce(origin, '')")},
 string_agg(length(payload)::text, ',' ORDER BY seq),
 string_agg(payload, ''::bytea ORDER BY seq),
 count(properties) FROM journal WHERE seq >= %s AND seq <= %s"""
_PROPERTIES_SQL = """SELECT string_agg(seq::text, ',' ORDER BY seq),
 string_agg(length(properties)::text, ',' ORDER BY seq),
 string_agg(properties, ''::bytea ORDER BY seq) FROM journal
 WHERE seq >= %s AND seq <= %s AND properties IS NOT NULL"""
_SEQS_SQL = (
    "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM journal WHERE seq >= %s AND seq <= %s"
)
_ROWS_SQL = """SELECT seq, ts_us, topic, sub_point, qos, retain, payload, client_id, user_id,
 properties, origin FROM journal WHERE seq >= %s AND seq <= %s ORDER BY seq"""


def _prepare(conn: psycopg.Connection[Any], location: PostgresLocation) -> None:
    """Make `conn` a reader's: read-only, on a telemq store of a schema this telemq reads;
    StoreError otherwise."""
    try:
        conn.execute("SET default_transaction_read_only = on")
        version = schema_version(conn)
    except psycopg.Error as exc:
        raise StoreError(f"cannot read the postgres store: {one_line(exc)}") from None
    if version is None:
        raise StoreError(f"no telemq store in the postgres database ({location})")
    check_version(version)


def _bytes(value: object) -> bytes:
    """An aggregate as bytes: text encoded, NULL (no rows) empty."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise StoreError(f"the journal read back {type(value).__name__}, not bytes")


class PostgresJournalReader:
    """Read-only access to a PostgreSQL store's journal and subscriptions."""

    packed_in_order = True  # every aggregate is ORDER BY seq

    def __init__(self, location: PostgresLocation | str) -> None:
        """StoreError when the database cannot be reached or holds no telemq store (or one
        of a newer schema)."""
        if not isinstance(location, PostgresLocation):
            location = PostgresLocation(location)
        self._conn = connect(location, application=APPLICATION)
        self._release: Callable[[], None] = self._conn.close
        try:
            _prepare(self._conn, location)
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def borrowing(
        cls, conn: psycopg.Connection[Any], release: Callable[[], None]
    ) -> PostgresJournalReader:
        """A reader on a connection prepared by `_prepare` (a pooled one): `close` calls
        `release` instead of closing it."""
        reader = cls.__new__(cls)
        reader._conn = conn
        reader._release = release
        return reader

    def close(self) -> None:
        self._release()

    def __enter__(self) -> PostgresJournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
        try:
            row = self._conn.execute(sql.encode(), params).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the journal: {one_line(exc)}") from exc
        assert row is not None
        return tuple(row)

    def bounds(self) -> tuple[int, int]:
        """As `JournalReader.bounds`: (first seq still there, last seq ever written)."""
        low, high, mark = self._one(
            "SELECT (SELECT min(seq) FROM journal), (SELECT max(seq) FROM journal),"
            " (SELECT value FROM meta WHERE key = 'next_seq')",
            (),
        )
        last = max(high or 0, (mark - 1) if isinstance(mark, int) else 0)
        return (last + 1 if low is None else low), last

    def packed(self, first: int, last: int) -> PackedRange:
        """As `JournalReader.packed`: the rows ``first <= seq <= last`` as one row."""
        try:
            with self._conn.transaction():  # one snapshot for both statements
                self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                count, low, high, *columns, with_properties = self._one(_PACKED_SQL, (first, last))
                if with_properties:
                    columns += self._one(_PROPERTIES_SQL, (first, last))
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the journal: {one_line(exc)}") from exc
        if not count:
            return PackedRange(0, 0, 0, b"", b"", b"", b"", b"", b"", b"", b"", b"")
        return PackedRange(int(count), int(low), int(high), *(_bytes(v) for v in columns))

    def seqs(self, first: int, last: int) -> bytes:
        """The seqs in ``first..last``, decimal and comma-separated."""
        return _bytes(self._one(_SEQS_SQL, (first, last))[0])

    def rows(self, first: int, last: int) -> list[JournalRowValues]:
        """The rows ``first <= seq <= last`` in seq order, one tuple each."""
        try:
            return self._conn.execute(_ROWS_SQL.encode(), (first, last)).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the journal: {one_line(exc)}") from exc

    def subscriptions(self) -> list[SubscriptionRow]:
        """Every stored subscription (of persistent sessions and MQ queues)."""
        try:
            rows = self._conn.execute("SELECT client_id, key, data FROM subscriptions").fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the subscriptions: {one_line(exc)}") from exc
        return [SubscriptionRow(str(c), str(k), str(d or "")) for c, k, d in rows]


class PostgresReaderPool:
    """Journal readers of one database on pooled connections (see the module docstring)."""

    def __init__(self, location: PostgresLocation, max_size: int = POOL_SIZE) -> None:
        from psycopg_pool import ConnectionPool

        self._location = location

        def configure(conn: psycopg.Connection[Any]) -> None:
            _prepare(conn, location)

        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            lambda: location.conninfo(APPLICATION),
            kwargs={"autocommit": True},
            min_size=1,
            max_size=max_size,
            open=False,
            configure=configure,
            check=ConnectionPool.check_connection,  # one gone stale (a server restart): a new one
            name="telemq-journal",
            timeout=POOL_WAIT_S,
            max_idle=POOL_IDLE_S,
        )
        self._opened = False
        self._lock = threading.Lock()

    def reader(self) -> PostgresJournalReader:
        """A reader on a pooled connection, until its `close`; StoreError when none can be
        had within `POOL_WAIT_S`."""
        from psycopg_pool import PoolTimeout

        with self._lock:
            if not self._opened:
                self._pool.open(wait=False)
                self._opened = True
        try:
            conn = self._pool.getconn()
        except PoolTimeout:
            # Why: connect once without the pool (the server's own words), else busy.
            PostgresJournalReader(self._location).close()
            raise StoreError(
                f"every one of the journal service's {self._pool.max_size} connections to the"
                f" postgres store stayed busy for {POOL_WAIT_S:g} s"
            ) from None
        return PostgresJournalReader.borrowing(conn, lambda: self._pool.putconn(conn))

    def close(self) -> None:
        with self._lock:
            if self._opened:
                self._pool.close()
                self._opened = False
