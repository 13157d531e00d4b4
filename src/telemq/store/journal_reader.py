"""Reading a store from outside the broker: the journal and the stored subscriptions.

Theory of operation
-------------------
`JournalReader` is the only code outside the store that reads the store's file, so the
tables stay the store's business: the pipeline asks for seq ranges and gets values back,
never SQL. It holds one read-only connection (`open_journal_reader`); each call is one short
read transaction, so in WAL mode the broker never waits for it and checkpoints between
calls.

Reading fast. Python's `sqlite3` builds a tuple and one object per value, which costs more
than everything else a reader does per row. `packed` therefore fetches a range as *one* row
of aggregates, every column concatenated by SQLite in C (`group_concat`), for the caller to
split in bulk (the pipeline does it with pyarrow):

- text columns (`topic`, `sub_point`, `client_id`, `user_id`, `origin`) joined by U+0000,
  which MQTT forbids in UTF-8 strings (a count that does not match tells the caller to use
  `rows`); a NULL `origin` (a row older than schema 6) as "";
- `payload` (any bytes) concatenated as is, with the lengths as decimal text beside it;
- `ts_us` as decimal text; `qos * 2 + retain` as one digit per row;
- `seq` as min and max (no gap when max - min + 1 == count), else `seqs` gives them;
- `properties` (MQTT 5.0, NULL for none: nearly every row) only counted; a range that has
  some reads them in a second statement, only the rows that have them: their seqs and
  lengths as decimal text, and the blobs concatenated. Both statements are one read
  transaction, so they see the same rows. (Aggregating them in the first statement would
  cost a range without any about 7% more.)

A file of schema 4 (an offline copy, or one an older broker still writes) has no
`properties` column, and one older than schema 6 no `origin`: the reader then reads NULL in
their place, so every row has none.

Every aggregate sees the rows in the same order, ascending `seq`, because the plan is a range
search on the integer primary key; `packed_in_order` checks the plan once per reader, and
`rows` (`ORDER BY seq`) is always right.

A PostgreSQL store has a reader of its own (postgres_reader.py) with the same methods:
`JournalReading` is what both offer, and `open_reader` opens the one a `JournalLocation` (a
data directory or file, or a `PostgresLocation`) calls for. `JournalReaders` is where a
server that reads many times (the journal service) gets its readers: a SQLite reader opened
for each (opening a file costs little), a PostgreSQL reader on a connection of a pool
(connecting and authenticating cost a round trip or more each).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from .base import StoreError
from .postgres_connection import PSYCOPG_EXTRA as _PSYCOPG
from .postgres_connection import PostgresLocation
from .sqlite import open_journal_reader

# `{p}`, `{o}`: the properties and origin columns, or NULL in a file without (`_sql`).
_PACKED_SQL = """SELECT count(*), min(seq), max(seq), group_concat(ts_us, ','),
 group_concat(qos * 2 + retain, ''), group_concat(topic, char(0)),
 group_concat(sub_point, char(0)), group_concat(client_id, char(0)),
 group_concat(user_id, char(0)), group_concat(ifnull({o}, ''), char(0)),
 group_concat(length(payload), ','), group_concat(payload, ''),
 count({p}) FROM journal WHERE seq >= ? AND seq <= ?"""
_PROPERTIES_SQL = """SELECT group_concat(seq, ','), group_concat(length(properties), ','),
 group_concat(properties, '') FROM journal
 WHERE seq >= ? AND seq <= ? AND properties IS NOT NULL"""
_SEQS_SQL = "SELECT group_concat(seq, ',') FROM journal WHERE seq >= ? AND seq <= ?"
_ROWS_SQL = """SELECT seq, ts_us, topic, sub_point, qos, retain, payload, client_id, user_id,
 {p}, {o} FROM journal WHERE seq >= ? AND seq <= ? ORDER BY seq"""

JournalRowValues = tuple[int, int, str, str, int, int, bytes, str, str, bytes | None, str | None]
"""seq, ts_us, topic, sub_point, qos, retain, payload, client_id, user_id, properties (None
for none), origin (None before schema 6)."""


@dataclass(frozen=True, slots=True)
class PackedRange:
    """One seq range as concatenated columns (see module docstring); bytes throughout."""

    count: int
    low: int
    high: int
    ts_us: bytes  # decimal, comma-separated
    flags: bytes  # one ASCII digit per row: qos * 2 + retain
    topic: bytes  # U+0000-separated
    sub_point: bytes
    client_id: bytes
    user_id: bytes
    origin: bytes  # U+0000-separated; "" for a row older than schema 6
    lengths: bytes  # payload lengths, decimal, comma-separated
    payload: bytes  # the payloads, concatenated
    property_seqs: bytes = b""  # seqs of the rows with properties, decimal, comma-separated
    property_lengths: bytes = b""  # their lengths, decimal, comma-separated
    properties: bytes = b""  # their properties, concatenated


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    """A stored subscription: its queue (client id), key and attributes (JSON text)."""

    client_id: str
    key: str
    data: str


class JournalReader:
    """Read-only access to a store's journal and subscriptions (see module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """`path`: a data directory or its store file; `StoreError` when it holds none."""
        self._conn = open_journal_reader(path)
        self._in_order: bool | None = None
        self._columns: dict[str, str] | None = None  # `_sql`'s placeholders

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bounds(self) -> tuple[int, int]:
        """``(first, last)``: the first seq still in the journal and the last seq ever written.

        An empty journal gives ``(last + 1, last)``; `last` survives trimming (the store keeps
        its high-water mark), so offsets never move backwards.
        """
        # Subqueries: each is one b-tree lookup, where MIN and MAX side by side scan the
        # table; one statement, so they see the same snapshot.
        low, high = self._conn.execute(
            "SELECT (SELECT MIN(seq) FROM journal), (SELECT MAX(seq) FROM journal)"
        ).fetchone()
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
        last = max(high or 0, (row[0] - 1) if row and isinstance(row[0], int) else 0)
        return (last + 1 if low is None else low), last

    @property
    def packed_in_order(self) -> bool:
        """Whether SQLite reads `packed` ranges in seq order (an in-order rowid range search)."""
        if self._in_order is None:
            sql = "EXPLAIN QUERY PLAN " + self._sql(_PACKED_SQL)
            plan = self._conn.execute(sql, (1, 1)).fetchall()
            details = " ".join(str(row[-1]) for row in plan)
            self._in_order = "INTEGER PRIMARY KEY" in details and "SCAN" not in details
        return self._in_order

    def packed(self, first: int, last: int) -> PackedRange:
        """The rows ``first <= seq <= last`` as one row of concatenated columns."""
        conn = self._conn
        conn.execute("BEGIN")  # one snapshot for both statements
        try:
            count, low, high, *columns, with_properties = self._bytes_query(
                self._sql(_PACKED_SQL), first, last
            )
            if with_properties:
                columns += self._bytes_query(_PROPERTIES_SQL, first, last)
        finally:
            conn.execute("COMMIT")
        if not count:
            return PackedRange(0, 0, 0, b"", b"", b"", b"", b"", b"", b"", b"", b"")
        return PackedRange(int(count), int(low), int(high), *(bytes(v or b"") for v in columns))

    def seqs(self, first: int, last: int) -> bytes:
        """The seqs in ``first..last``, decimal and comma-separated (a range with gaps)."""
        return bytes(self._bytes_query(_SEQS_SQL, first, last)[0] or b"")

    def rows(self, first: int, last: int) -> list[JournalRowValues]:
        """The rows ``first <= seq <= last`` in seq order, one tuple each (slow, always right)."""
        return self._conn.execute(self._sql(_ROWS_SQL), (first, last)).fetchall()

    def subscriptions(self) -> list[SubscriptionRow]:
        """Every stored subscription (of persistent sessions and MQ queues)."""
        rows = self._conn.execute("SELECT client_id, key, data FROM subscriptions").fetchall()
        return [SubscriptionRow(str(c), str(k), str(d or "")) for c, k, d in rows]

    def _sql(self, template: str) -> str:
        """`template` for this file: with its properties and origin columns, or NULL where
        an older file has none (looked up once per reader, which lives for a range or so; a
        broker adds the columns when it starts)."""
        if self._columns is None:
            present = {str(r[1]) for r in self._conn.execute("PRAGMA table_info(journal)")}
            self._columns = {
                key: column if column in present else "NULL"
                for key, column in (("p", "properties"), ("o", "origin"))
            }
        return template.format(**self._columns)

    def _bytes_query(self, sql: str, first: int, last: int) -> tuple[Any, ...]:
        """One row, text as bytes (what the packed columns are split from)."""
        conn = self._conn
        factory = conn.text_factory
        conn.text_factory = bytes
        try:
            row: tuple[Any, ...] = conn.execute(sql, (first, last)).fetchone()
            return row
        finally:
            conn.text_factory = factory


JournalLocation = str | os.PathLike[str] | PostgresLocation
"""Where a store's journal is: a SQLite store's data directory (or file), or a PostgreSQL
store's database."""


class JournalReading(Protocol):
    """What a journal reader offers, whichever store it reads (`JournalReader`'s methods)."""

    @property
    def packed_in_order(self) -> bool: ...

    def bounds(self) -> tuple[int, int]: ...

    def packed(self, first: int, last: int) -> PackedRange: ...

    def seqs(self, first: int, last: int) -> bytes: ...

    def rows(self, first: int, last: int) -> list[JournalRowValues]: ...

    def subscriptions(self) -> list[SubscriptionRow]: ...

    def close(self) -> None: ...

    def __enter__(self) -> JournalReading: ...

    def __exit__(self, *exc: object) -> None: ...


def open_reader(location: JournalLocation) -> JournalReading:
    """A reader of the journal at `location`; StoreError when there is none to read."""
    if isinstance(location, PostgresLocation):
        try:
            from .postgres_reader import PostgresJournalReader
        except ImportError as exc:
            raise StoreError(f"the postgres store needs psycopg ({_PSYCOPG}): {exc}") from None
        return PostgresJournalReader(location)
    return JournalReader(location)


class JournalReaders:
    """The readers of one journal for a server that reads it often (module docstring):
    `open` one per read, `close` the lot when the server stops."""

    def __init__(self, location: JournalLocation) -> None:
        self.location = location
        self._pool: Any = None  # a PostgresReaderPool, made at the first read
        self._lock = threading.Lock()  # reads come from worker threads

    def open(self) -> JournalReading:
        """A reader, until its `close`; StoreError when there is none to read."""
        location = self.location
        if not isinstance(location, PostgresLocation):
            return JournalReader(location)
        with self._lock:
            if self._pool is None:
                try:
                    from .postgres_reader import PostgresReaderPool
                except ImportError as exc:
                    raise StoreError(
                        f"the journal service needs psycopg_pool ({_PSYCOPG}): {exc}"
                    ) from None
                self._pool = PostgresReaderPool(location)
            pool = self._pool
        reader: JournalReading = pool.reader()
        return reader

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


__all__ = [
    "JournalLocation",
    "JournalReader",
    "JournalReaders",
    "JournalReading",
    "JournalRowValues",
    "PackedRange",
    "SubscriptionRow",
    "open_reader",
]
