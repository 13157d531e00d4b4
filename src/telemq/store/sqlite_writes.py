"""How `SqliteStore.commit` writes a batch: one plan per kind of op, multi-row statements.

Theory of operation
-------------------
`commit` opens a `BEGIN IMMEDIATE` transaction, sorts the batch's ops into one lane per
table (`LANES_OF`, keeping their order within each table: ops on different tables commute),
writes each run of same-kind ops in a lane with a few multi-row statements (`write_rows`,
cached), then the journal rows (kept flat by the batch, one statement per sealed chunk:
`write_journal`), and ends with `COMMIT`; with `synchronous=FULL` that is one fsync of the
WAL per batch. So the broker's "journal, message, delivery" per publication costs a few
statements per batch, not three per message. Per op, Python only builds a parameter tuple
(`_codec`); `data` is JSON-encoded only when not empty.

What each kind of op writes is its `Plan`: the statements per lane, the row builder, how it
changes the message count, and the high-water mark its ids may raise (sqlite_schema.py).
Every statement's multi-row forms are made once, at import, from its one-row text.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from functools import partial
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from . import _codec
from ._codec import COLUMNS, Row
from .base import JOURNAL_CHUNK_ROWS, JOURNAL_FIELDS, Op, WriteBatch
from .sqlite_schema import ROW_KEYS


def _insert(table: str, verb: str, nullable: tuple[str, ...] = ()) -> str:
    """The one-row INSERT of every column of `table` (`_multi_row` widens it); the
    `nullable` columns are bound as 0 for NULL (see `_BOUND_NULL`)."""
    columns = COLUMNS[table]
    marks = ", ".join("NULLIF(?, 0)" if column in nullable else "?" for column in columns)
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({marks})"


# -- the per-message tables' rows as the sqlite3 module binds them fastest ------------------
# It binds exact ints, floats, strs and bytearrays directly; anything else, None and bytes
# included, first goes through its adapter lookup (a dict probe and two failed attribute
# lookups, each formatting its error message), holding the GIL: 0.25 to 0.3 us a parameter,
# measured, about 1 us of the 3 a message row costs. So the rows of the tables every QoS 1/2
# or retained publication writes bind their blobs as bytearrays and their NULLs as 0, which
# the statement turns back into NULL (`NULLIF(?, 0)`, as the journal's properties): what is
# stored is what `_codec`'s rows store for the memory and PostgreSQL stores. None of these
# columns holds a 0 of its own (blobs, JSON text, `expiry_at`'s 0.0 is NULL, `local_only`'s 0
# is NULL: every broker's).
_BOUND_NULL = ("properties", "expiry_at", "data", "local_only")
BOUND_FAST: dict[str, Any] = {"null": 0, "blob": bytearray}


# A commit writes table by table (lane by lane), keeping the batch's order within each
# table. Ops on different tables commute (no foreign keys; the only shared row, a high-water
# mark in `meta`, is only ever raised), so the result is the batch's, and the broker's
# interleaved "message, delivery" per publication becomes a few multi-row statements (the
# journal rows travel apart, flat: `write_journal`).
_SESSIONS, _SUBSCRIPTIONS, _RETAINED, _MESSAGES, _DELIVERIES, _INCOMING = range(6)


def _raise_mark_from(key: str, table: str, column: str, where: str) -> str:
    """SQL raising a high-water mark past the rows a delete is about to remove."""
    return (
        f"UPDATE meta SET value = MAX(value, (SELECT IFNULL(MAX({column}), 0) + 1"
        f" FROM {table} WHERE {where})) WHERE key = '{key}'"
    )


class Plan(NamedTuple):
    """How `commit` writes one kind of op."""

    statements: dict[int, tuple[str, ...]]  # per lane, run in order with the same parameters
    build: Callable[[Any], Row] | None  # row builder; None: the op's args are the parameters
    counted: int  # change of the message count per row the (last) statement affects
    mark: tuple[str, int] | None  # meta key these ids may have to raise, and the id's column


_BY_CLIENT = "client_id = ?"
_PUT_RETAINED = _insert("retained", "INSERT OR REPLACE", _BOUND_NULL)
_PUT_INCOMING = _insert("incoming", "INSERT OR REPLACE", _BOUND_NULL)
PLAN: dict[Op, Plan] = {
    Op.PUT_SESSION: Plan(
        {_SESSIONS: (_insert("sessions", "INSERT OR REPLACE"),)}, _codec.session_row, 0, None
    ),
    Op.DELETE_SESSION: Plan(
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
    Op.PUT_SUBSCRIPTION: Plan(
        {_SUBSCRIPTIONS: (_insert("subscriptions", "INSERT OR REPLACE"),)},
        _codec.subscription_row,
        0,
        None,
    ),
    Op.DELETE_SUBSCRIPTION: Plan(
        {_SUBSCRIPTIONS: ("DELETE FROM subscriptions WHERE client_id = ? AND key = ?",)},
        None,
        0,
        None,
    ),
    Op.PUT_RETAINED: Plan(
        {_RETAINED: (_PUT_RETAINED,)}, partial(_codec.retained_row, **BOUND_FAST), 0, None
    ),
    Op.DELETE_RETAINED: Plan(
        {_RETAINED: ("DELETE FROM retained WHERE sub_point = ? AND topic = ?",)}, None, 0, None
    ),
    # Bound already (`RetainedRow`): `tuple` gives the row itself back, at C speed.
    Op.PUT_RETAINED_ROW: Plan({_RETAINED: (_PUT_RETAINED,)}, tuple, 0, None),
    # Messages are immutable: putting an id that is already stored keeps the stored one.
    # (Not INSERT OR IGNORE: that would also skip rows that violate a CHECK.)
    Op.PUT_MESSAGE: Plan(
        {_MESSAGES: (_insert("messages", "INSERT", _BOUND_NULL) + " ON CONFLICT (id) DO NOTHING",)},
        partial(_codec.message_row, **BOUND_FAST),
        1,
        None,
    ),
    Op.DELETE_MESSAGE: Plan(
        {_MESSAGES: ("DELETE FROM messages WHERE id = ?",)}, None, -1, ("next_message_id", 0)
    ),
    Op.PUT_DELIVERY: Plan(
        {_DELIVERIES: (_insert("deliveries", "INSERT OR REPLACE", _BOUND_NULL),)},
        partial(_codec.delivery_row, null=0),
        0,
        None,
    ),
    Op.DELETE_DELIVERY: Plan(
        {_DELIVERIES: ("DELETE FROM deliveries WHERE delivery_id = ?",)},
        None,
        0,
        ("next_delivery_id", 0),
    ),
    # A held QoS 2 message's id raises the mark when it is put (the broker's are 0: not yet
    # stored as a message), so neither replacing nor deleting a held message has to.
    Op.PUT_INCOMING: Plan(
        {_INCOMING: (_PUT_INCOMING,)},
        partial(_codec.incoming_row, **BOUND_FAST),
        0,
        ("next_message_id", 2),
    ),
    Op.PUT_INCOMING_ROW: Plan({_INCOMING: (_PUT_INCOMING,)}, tuple, 0, ("next_message_id", 2)),
    Op.DELETE_INCOMING: Plan(
        {_INCOMING: ("DELETE FROM incoming WHERE client_id = ? AND packet_id = ?",)},
        None,
        0,
        None,
    ),
    Op.RELEASE_INCOMING: Plan(
        {_INCOMING: ("UPDATE incoming SET released = 1 WHERE client_id = ? AND packet_id = ?",)},
        None,
        0,
        None,
    ),
}


def _lanes_by_op() -> list[tuple[int, ...]]:
    """Indexed by op value: the lanes an op goes to (a list index beats a dict lookup)."""
    lanes: list[tuple[int, ...]] = [()] * (max(Op) + 1)
    for op, plan in PLAN.items():
        lanes[op] = tuple(plan.statements)
    return lanes


LANES_OF = _lanes_by_op()
op_of = itemgetter(0)

# Rows per statement, largest first. `executemany` releases the GIL around every row's
# step; while the event loop thread is busy, taking it back costs up to the switch
# interval each time, so a writer writing row by row crawls exactly when the broker is
# loaded. Multi-row statements take it back once per statement (and bind in C). Deletes
# (a QoS 2 release, an acknowledged delivery) come in smaller runs than journal rows: powers
# of two keep any run to a few statements. A run of up to `_EXACT_ROWS` rows (the batches of
# a light load) is one statement of its exact size, made on first use.
_ROWS_PER_STATEMENT = (512, 256, 128, 64, 32, 16, 8, 4, 2)
_EXACT_ROWS = 32
CACHED_STATEMENTS = 1024  # every multi-row form of every statement stays prepared

# An INSERT's value list, whose terms may be function calls (`JournalStatements`).
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
    if len(columns) > 1 and table in ROW_KEYS:
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
    for plan in PLAN.values()
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


# Held QoS 2 messages (`incoming`) are keyed by (client_id, packet_id), with no rowid to
# join on; but a run of their deletes or releases mostly names one client's packets (a
# publisher's window): one statement per client, `packet_id IN (...)`, which searches the
# primary key once per id. Alone it is hardly faster than a step per row (10.4 against
# 11.2 us for 10 ids), but on the writer thread it takes the GIL back once per statement,
# not once per row (see `_ROWS_PER_STATEMENT`).
_PER_CLIENT: dict[str, str] = {
    sql: sql.replace("packet_id = ?", "packet_id IN ({})")
    for op in (Op.DELETE_INCOMING, Op.RELEASE_INCOMING)
    for sql in PLAN[op].statements[_INCOMING]
}
_IN_LISTS: dict[tuple[str, int], str] = {}  # (template, ids) -> its statement


def _per_client(conn: sqlite3.Connection, template: str, params: list[Any]) -> int:
    """A run of (client_id, packet_id) rows as one statement per client and size."""
    ids_of: dict[str, list[int]] = {}
    for client_id, packet_id in params:
        ids = ids_of.get(client_id)
        if ids is None:
            ids_of[client_id] = [packet_id]
        else:
            ids.append(packet_id)
    changed = 0
    for client_id, ids in ids_of.items():
        start, end = 0, len(ids)
        while start < end:
            # Exact up to `_EXACT_ROWS`; beyond, the largest power of two that fits: a few
            # forms per template stay prepared, whatever the windows.
            rows = end - start
            if rows > _EXACT_ROWS:
                rows = next(size for size in _ROWS_PER_STATEMENT if size <= rows)
            sql = _IN_LISTS.get((template, rows))
            if sql is None:
                sql = _IN_LISTS[template, rows] = template.format(", ".join("?" * rows))
            changed += conn.execute(sql, [client_id, *ids[start : start + rows]]).rowcount
            start += rows
    return changed


def write_rows(conn: sqlite3.Connection, sql: str, params: list[Any]) -> int:
    """Run `sql` once per parameter row, in order; returns the number of rows changed."""
    end = len(params)
    template = _PER_CLIENT.get(sql)
    if template is not None and end > 1:
        return _per_client(conn, template, params)
    variants = _MULTI_ROW.get(sql)
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
# the store's name (`JournalStatements`), so the column costs the writer nothing per row
# (binding is done holding the GIL). Rows of publications made elsewhere bind it.
_INSERT_FOREIGN = _insert("journal", "INSERT").removesuffix("?, ?)") + "NULLIF(?, 0), ?)"


class JournalStatements(NamedTuple):
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
    def of(cls, origin: str) -> JournalStatements:
        # As hex: any name is safe in SQL text, and `_multi_row` reads the value list.
        literal = f"CAST(x'{origin.encode('utf-8').hex()}' AS TEXT)" if origin else "NULL"
        single = _INSERT_FOREIGN.removesuffix("?)") + literal + ")"
        runs = tuple(
            (rows * JOURNAL_FIELDS, _multi_row(single, rows) or single)
            for rows in (JOURNAL_CHUNK_ROWS, 512, 128, 32, 8, 2, 1)
        )
        return cls(single, runs)


def write_journal(
    conn: sqlite3.Connection, batch: WriteBatch, statements: JournalStatements
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
