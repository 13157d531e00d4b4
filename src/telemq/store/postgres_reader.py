"""Reading a PostgreSQL store from outside the broker: `PostgresJournalReader`.

Theory of operation
-------------------
The PostgreSQL twin of `JournalReader` (journal_reader.py), with the same methods and the
same answers, so that the journal service and the Arrow encoding (`telemq.journal.arrow`)
read either store alike. It holds a connection of its own, read-only
(``default_transaction_read_only``), which takes no lock: PostgreSQL's MVCC means the
broker's commits never wait for it and it never waits for them. Each call is one statement,
or one ``REPEATABLE READ`` transaction where two statements must see the same rows.

`packed` asks the server for one row of aggregates, as the SQLite reader does with
``group_concat``: ``string_agg`` with ``ORDER BY seq`` (so `packed_in_order` is always
true). PostgreSQL's text cannot hold U+0000, so the text columns are aggregated as bytes
(``convert_to(..., 'UTF8')``) with a zero byte between them; payloads and properties are
``bytea`` already.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .base import StoreError
from .journal_reader import JournalRowValues, PackedRange, SubscriptionRow
from .postgres_connection import PostgresLocation, connect, one_line
from .postgres_schema import check_version, schema_version

__all__ = ["PostgresJournalReader"]


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
        self._conn = connect(location, application="telemq journal reader")
        try:
            self._conn.execute("SET default_transaction_read_only = on")
            version = schema_version(self._conn)
            if version is None:
                raise StoreError(f"no telemq store in the postgres database ({location})")
            check_version(version)
        except psycopg.Error as exc:
            self._conn.close()
            raise StoreError(f"cannot read the postgres store: {one_line(exc)}") from None
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

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
