"""How `PostgresStore.commit` writes a batch: planned in Python, sent in one pipeline.

Theory of operation
-------------------
A commit is one transaction, and in the common case one round trip to the server. `plan`
first turns the batch into statements and their parameter rows, in Python, before anything
is sent. The ops are taken table by table (`_TABLE_OF`: ops on different tables commute;
their order within each table is kept; a batch that deletes a session, which spans four
tables, keeps its order as it is), and each run of same-kind ops (`itertools.groupby`)
becomes one `executemany` of the op's statements (`PLAN`), with the rows built by the
shared codec and checked by its CHECK twins (`_codec.check_*`: PostgreSQL would convert
some values SQLite refuses, text into ``bytea`` for one, so both stores refuse them here as
the memory store does). A row that fails its check fails the batch before the server hears
of it. A run of `ARRAY_ROWS` or more messages or deliveries put or deleted (the broker's
"message, delivery" per publication to a persistent session, and their deletes when
acknowledged), or retained messages put, is instead one statement over an array per column
(`_ARRAYS`): an `executemany` costs the writer thread (holding the GIL) and the server some
15 us per row each, the arrays a fraction of that. One statement may not upsert a key
twice, so a run of upserts keeps the last row of each key, which is what the run would have
left. Held QoS 2 messages (`incoming`) come interleaved (one publication's put, another's
release, a third's delete), so their runs are short: when a batch has `ARRAY_ROWS` or more
of those ops, they are merged key by key into what they leave (`_held_steps`) and written
as at most three statements over arrays, deletes, puts and releases.

The store then sends, in psycopg's pipeline mode (libpq queues the statements and the
server runs them as they arrive, answering at the end): ``BEGIN``, every run, the
high-water marks the batch raises (`RAISE_MARK`), the journal rows, and ``COMMIT``: one
round trip. The journal rows are one statement (`INSERT_JOURNAL_ROWS`: an array per
column, sent in binary, ``unnest`` makes them rows again), not one INSERT per row: a
pipelined INSERT costs about 15 us of the writer thread's time holding the GIL per row,
and as much again in the server. An error anywhere makes the server skip the rest up to
the pipeline's end; the store rolls back and nothing of the batch is applied.

A batch of journal rows and nothing else (`COPY_ALONE_ROWS` or more: QoS 0 and 1
publications to clean sessions, the bulk of a busy broker's batches) is one ``COPY`` sent
outside a transaction block: a single statement is a transaction of its own, so it is
applied whole or not at all, and committed under the session's ``synchronous_commit`` as
``COMMIT`` would be. Two round trips and no ``BEGIN``; per row it costs about a fifth of a
pipelined INSERT in the writer thread and in the server alike, half of the arrays
(docs/postgres.md, "Speed"). (``COPY`` cannot run in a pipeline, so a batch with other
writes would pay two more round trips for it: there the arrays win.)

Upserts are ``INSERT ... ON CONFLICT (key) DO UPDATE`` (SQLite's INSERT OR REPLACE), a
message already stored is kept (``DO NOTHING``: messages are immutable), and a session's
delete raises the delivery mark from the rows it removes, as in SQLite.

Journal rows come flat from the batch (`JournalRow`); `journal_rows` reshapes them into
tuples with their origin, no properties (0) as NULL.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple

from . import _codec
from ._codec import COLUMNS, BadRecord, Row
from .base import JOURNAL_FIELDS, Op, WriteBatch

__all__ = [
    "COPY_ALONE_ROWS",
    "COPY_JOURNAL",
    "INSERT_JOURNAL",
    "INSERT_JOURNAL_ROWS",
    "PLAN",
    "Planned",
    "journal_columns",
    "journal_rows",
    "plan",
]

COPY_ALONE_ROWS = 8  # journal rows from which a batch of nothing else is one COPY


def _insert(table: str) -> str:
    columns = COLUMNS[table]
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"


def _upsert(table: str, *keys: str) -> str:
    """SQLite's INSERT OR REPLACE: the row, replacing the one with the same key."""
    others = [c for c in COLUMNS[table] if c not in keys]
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in others)
    return f"{_insert(table)} ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"


class Plan(NamedTuple):
    """How `plan` writes one kind of op."""

    statements: tuple[str, ...]  # run in order, each over every row of a run
    build: Callable[[Any], Row] | None  # row builder; None: the op's args are the parameters
    check: Callable[[Row], None] | None  # the codec's CHECK twin for the built row
    mark: tuple[str, int] | None  # meta key these ids may have to raise, and the id's column


_RAISE_DELIVERY_MARK = (
    "UPDATE meta SET value = GREATEST(value, (SELECT COALESCE(max(delivery_id), 0) + 1"
    " FROM deliveries WHERE client_id = %s)) WHERE key = 'next_delivery_id'"
)

_PUT_RETAINED = _upsert("retained", "sub_point", "topic")
_PUT_INCOMING = _upsert("incoming", "client_id", "packet_id")
PLAN: dict[Op, Plan] = {
    Op.PUT_SESSION: Plan((_upsert("sessions", "client_id"),), _codec.session_row, None, None),
    Op.DELETE_SESSION: Plan(
        (
            _RAISE_DELIVERY_MARK,
            "DELETE FROM sessions WHERE client_id = %s",
            "DELETE FROM subscriptions WHERE client_id = %s",
            "DELETE FROM deliveries WHERE client_id = %s",
            "DELETE FROM incoming WHERE client_id = %s",
        ),
        None,
        None,
        None,
    ),
    Op.PUT_SUBSCRIPTION: Plan(
        (_upsert("subscriptions", "client_id", "key"),), _codec.subscription_row, None, None
    ),
    Op.DELETE_SUBSCRIPTION: Plan(
        ("DELETE FROM subscriptions WHERE client_id = %s AND key = %s",), None, None, None
    ),
    Op.PUT_RETAINED: Plan((_PUT_RETAINED,), _codec.retained_row, _codec.check_retained, None),
    Op.DELETE_RETAINED: Plan(
        ("DELETE FROM retained WHERE sub_point = %s AND topic = %s",), None, None, None
    ),
    Op.PUT_RETAINED_ROW: Plan(
        (_PUT_RETAINED,), _codec.retained_from_bound, _codec.check_retained, None
    ),
    Op.PUT_MESSAGE: Plan(
        (_insert("messages") + " ON CONFLICT (id) DO NOTHING",),
        _codec.message_row,
        _codec.check_message,
        None,
    ),
    Op.DELETE_MESSAGE: Plan(
        ("DELETE FROM messages WHERE id = %s",), None, None, ("next_message_id", 0)
    ),
    Op.PUT_DELIVERY: Plan(
        (_upsert("deliveries", "delivery_id"),),
        _codec.delivery_row,
        _codec.check_delivery,
        None,
    ),
    Op.DELETE_DELIVERY: Plan(
        ("DELETE FROM deliveries WHERE delivery_id = %s",), None, None, ("next_delivery_id", 0)
    ),
    # A held QoS 2 message's id raises the mark when it is put (sqlite_writes.py).
    Op.PUT_INCOMING: Plan(
        (_PUT_INCOMING,),
        _codec.incoming_row,
        _codec.check_incoming,
        ("next_message_id", 2),
    ),
    Op.PUT_INCOMING_ROW: Plan(
        (_PUT_INCOMING,),
        _codec.incoming_from_bound,
        _codec.check_incoming,
        ("next_message_id", 2),
    ),
    Op.DELETE_INCOMING: Plan(
        ("DELETE FROM incoming WHERE client_id = %s AND packet_id = %s",), None, None, None
    ),
    Op.RELEASE_INCOMING: Plan(
        ("UPDATE incoming SET released = 1 WHERE client_id = %s AND packet_id = %s",),
        None,
        None,
        None,
    ),
}

INSERT_JOURNAL = _insert("journal")
COPY_JOURNAL = f"COPY journal ({', '.join(COLUMNS['journal'])}) FROM STDIN"


def _unnest(table: str, types: str) -> str:
    """INSERT of the rows that `unnest` makes of an array per column (binary); `types`: the
    columns' types, in `COLUMNS` order."""
    arrays = ", ".join(f"%b::{kind}[]" for kind in types.split())
    return f"INSERT INTO {table} ({', '.join(COLUMNS[table])}) SELECT * FROM unnest({arrays})"


# Many journal rows in one statement: one array per column, sent in binary.
INSERT_JOURNAL_ROWS = _unnest("journal", "int8 int8 text text int4 int4 bytea text text bytea text")


class Planned(NamedTuple):
    """A batch as statements: what `commit` sends."""

    steps: list[tuple[str, list[Row]]]  # (statement, parameter rows), in order
    raised: dict[str, int]  # high-water marks to raise: meta key -> value
    journal: list[Row]  # journal rows with their origin (`journal_rows`)


def _bytes(value: object) -> bool:
    return type(value) is bytes or type(value) is bytearray


def _journal_row(values: Any, origin: object) -> Row:
    """One journal row to write (see `journal_rows`); BadRecord when a value could not be
    stored by the SQLite store either."""
    properties = values[9]
    if properties is None or (properties == 0 and type(properties) is int):
        properties = None
    elif not _bytes(properties):
        raise BadRecord(f"journal: properties is not a blob: {type(properties).__name__}")
    if not _bytes(values[6]):
        raise BadRecord(f"journal: payload is not a blob: {type(values[6]).__name__}")
    if values[4] not in (0, 1, 2) or values[5] not in (0, 1):
        raise BadRecord(f"journal: qos or retain is invalid in {tuple(values)!r:.200}")
    if origin is not None and type(origin) is not str:
        raise BadRecord(f"journal: origin is not text: {origin!r:.100}")
    return (*values[:9], properties, origin)


def journal_rows(batch: WriteBatch, origin: str | None) -> list[Row]:
    """The batch's journal rows as tuples of the `journal` table's columns: this broker's
    with `origin` (its name; None: NULL), the others' with their own."""
    rows: list[Row] = []
    append = rows.append
    for values in batch.journal_values():
        for start in range(0, len(values), JOURNAL_FIELDS):
            append(_journal_row(values[start : start + JOURNAL_FIELDS], origin))
    for foreign in batch.journal_foreign:
        append(_journal_row(foreign, foreign[JOURNAL_FIELDS]))
    return rows


def journal_columns(rows: list[Row]) -> list[list[Any]]:
    """`rows` as the parameters of `INSERT_JOURNAL_ROWS`: a list per column."""
    return [list(column) for column in zip(*rows, strict=True)]


# The table each op writes: a batch's ops on different tables commute (no foreign keys;
# the only shared rows, the high-water marks, are only ever raised), so `plan` may write
# them table by table, keeping their order within each table, as SQLite does
# (sqlite_writes.py), and the broker's interleaved "message, delivery" per publication
# becomes two long runs. A session's delete touches four tables: a batch with one keeps
# its order as it is.
_TABLE_OF = {
    Op.PUT_SESSION: 0,
    Op.PUT_SUBSCRIPTION: 1,
    Op.DELETE_SUBSCRIPTION: 1,
    Op.PUT_RETAINED: 2,
    Op.DELETE_RETAINED: 2,
    Op.PUT_RETAINED_ROW: 2,
    Op.PUT_MESSAGE: 3,
    Op.DELETE_MESSAGE: 3,
    Op.PUT_DELIVERY: 4,
    Op.DELETE_DELIVERY: 4,
    Op.PUT_INCOMING: 5,
    Op.PUT_INCOMING_ROW: 5,
    Op.DELETE_INCOMING: 5,
    Op.RELEASE_INCOMING: 5,
}
ARRAY_ROWS = 4  # a run of this many rows of an op in `_ARRAYS` is one statement over arrays


def _floats(column: tuple[Any, ...]) -> list[Any]:
    """A REAL column as floats: an array holds one type, and ints are valid there."""
    return [None if value is None else float(value) for value in column]


def _message_columns(rows: list[Row]) -> list[list[Any]]:
    columns = [list(column) for column in zip(*rows, strict=True)]
    columns[10] = _floats(tuple(columns[10]))
    return columns


def _last_per_key(key_columns: int) -> Callable[[list[Row]], list[list[Any]]]:
    """The columns of a run of upserts keyed by its first `key_columns` columns. One
    statement may not upsert a key twice: the last row of each key is the one a run of
    upserts would have left."""

    def columns(rows: list[Row]) -> list[list[Any]]:
        last = {row[:key_columns]: row for row in rows}
        return [list(column) for column in zip(*last.values(), strict=True)]

    return columns


def _ids(rows: list[Row]) -> list[list[Any]]:
    return [[row[0] for row in rows]]


_MESSAGE_TYPES = "int8 text bytea int4 int4 text text text int8 bytea float8"
_DELIVERY_TYPES = "int8 text int8 int4 int4 int4 int4 text"
_DELIVERY_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS["deliveries"][1:])
_RETAINED_TYPES = "text text bytea int4 int8 text bytea int4"
_RETAINED_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS["retained"][2:])
_RETAINED_ARRAYS = (
    _unnest("retained", _RETAINED_TYPES)
    + f" ON CONFLICT (sub_point, topic) DO UPDATE SET {_RETAINED_UPDATES}",
    _last_per_key(2),
)
# Op -> (one statement over arrays for a whole run, the run's rows as its parameters).
_ARRAYS: dict[Op, tuple[str, Callable[[list[Row]], list[list[Any]]]]] = {
    # Messages are immutable: of two rows with one id in a run, the first stays.
    Op.PUT_MESSAGE: (
        _unnest("messages", _MESSAGE_TYPES) + " ON CONFLICT (id) DO NOTHING",
        _message_columns,
    ),
    Op.PUT_DELIVERY: (
        _unnest("deliveries", _DELIVERY_TYPES)
        + f" ON CONFLICT (delivery_id) DO UPDATE SET {_DELIVERY_UPDATES}",
        _last_per_key(1),
    ),
    Op.PUT_RETAINED: _RETAINED_ARRAYS,
    Op.PUT_RETAINED_ROW: _RETAINED_ARRAYS,
    Op.DELETE_MESSAGE: ("DELETE FROM messages WHERE id = ANY(%b::int8[])", _ids),
    Op.DELETE_DELIVERY: ("DELETE FROM deliveries WHERE delivery_id = ANY(%b::int8[])", _ids),
}


def _by_table(ops: list[tuple[Op, Any]]) -> list[tuple[Op, Any]]:
    """The ops table by table (see `_TABLE_OF`), or as they are if a session is deleted."""
    for op, _ in ops:
        if op == Op.DELETE_SESSION:
            return ops
    return sorted(ops, key=lambda entry: _TABLE_OF[entry[0]])  # stable: order kept per table


_HELD_PUTS = frozenset((Op.PUT_INCOMING, Op.PUT_INCOMING_ROW))
_HELD_OPS = _HELD_PUTS | {Op.RELEASE_INCOMING, Op.DELETE_INCOMING}
_INCOMING_TYPES = "text int4 int8 text bytea int4 int4 text text text int8 bytea float8 int4"
_INCOMING_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS["incoming"][2:])
_HELD_KEYS = (
    "unnest(%b::text[], %b::int4[]) AS k (client_id, packet_id)"
    " WHERE t.client_id = k.client_id AND t.packet_id = k.packet_id"
)
_PUT_HELD = (
    _unnest("incoming", _INCOMING_TYPES)
    + f" ON CONFLICT (client_id, packet_id) DO UPDATE SET {_INCOMING_UPDATES}"
)
_RELEASE_HELD = f"UPDATE incoming AS t SET released = 1 FROM {_HELD_KEYS}"
_DELETE_HELD = f"DELETE FROM incoming AS t USING {_HELD_KEYS}"
_PUT, _RELEASE, _DELETE = range(3)


def _held_steps(runs: list[tuple[Op, list[Row]]]) -> list[tuple[str, list[Row]]]:
    """A batch's held QoS 2 messages (`incoming`), merged key by key into what their ops
    leave (a put then a release: the put, released; a delete after anything: the delete;
    a put after anything: the put), then written as three statements over arrays at most.
    Rows of different keys are independent, so their order does not matter."""
    net: dict[Any, tuple[int, Row]] = {}
    for op, params in runs:
        if op in _HELD_PUTS:
            for row in params:
                net[row[0], row[1]] = (_PUT, row)
        elif op == Op.DELETE_INCOMING:
            for key in params:
                net[key] = (_DELETE, key)
        else:
            for key in params:
                was = net.get(key)
                if was is None:
                    net[key] = (_RELEASE, key)
                elif was[0] == _PUT:
                    net[key] = (_PUT, (*was[1][:13], 1))
    rows: tuple[list[Row], list[Row], list[Row]] = ([], [], [])
    for what, row in net.values():
        rows[what].append(row)
    puts, releases, deletes = rows
    steps: list[tuple[str, list[Row]]] = []
    if deletes:
        steps.append((_DELETE_HELD, [tuple(_ids_by_key(deletes))]))
    if puts:
        columns = [list(column) for column in zip(*puts, strict=True)]
        columns[12] = _floats(tuple(columns[12]))
        steps.append((_PUT_HELD, [tuple(columns)]))
    if releases:
        steps.append((_RELEASE_HELD, [tuple(_ids_by_key(releases))]))
    return steps


def _ids_by_key(keys: list[Row]) -> list[list[Any]]:
    return [[key[0] for key in keys], [key[1] for key in keys]]


def plan(batch: WriteBatch, marks: dict[str, int], origin: str | None) -> Planned:
    """The statements of `batch` (see the module docstring). `marks`: the high-water marks
    as the store last wrote them (only higher ones are raised). Raises BadRecord, or what
    the codec raises for a record it cannot encode (data that is not JSON)."""
    steps: list[tuple[str, list[Row]]] = []
    raised: dict[str, int] = {}
    ops = batch.ops if len(batch.ops) < 2 else _by_table(batch.ops)
    held: list[tuple[Op, list[Row]]] = []
    for op, run in groupby(ops, itemgetter(0)):
        statements, build, check, mark = PLAN[op]
        if build is None:
            params: list[Row] = [args for _, args in run]
        else:
            params = [build(args[0]) for _, args in run]
            if check is not None:
                for row in params:
                    check(row)
        if mark is not None:
            key, column = mark
            top = max(map(itemgetter(column), params)) + 1
            if top > marks[key] and top > raised.get(key, 0):
                raised[key] = top
        if op in _HELD_OPS and ops is not batch.ops:
            held.append((op, params))
            continue
        arrays = _ARRAYS.get(op) if len(params) >= ARRAY_ROWS else None
        if arrays is not None:
            sql, columns = arrays
            steps.append((sql, [tuple(columns(params))]))
        else:
            for sql in statements:
                steps.append((sql, params))
    if sum(len(params) for _, params in held) >= ARRAY_ROWS:
        steps += _held_steps(held)
    else:
        for op, params in held:
            for sql in PLAN[op].statements:
                steps.append((sql, params))
    return Planned(steps, raised, journal_rows(batch, origin))
