"""Durable broker state behind one small interface.

Theory of operation
-------------------
The broker owns its state in memory; the store is a durable mirror of it. Each change the
broker must not lose goes into a `WriteBatch`, an ordered list of operations, and
`Store.commit` applies the whole batch in one transaction before returning. Acknowledgements
that depend on the batch (PUBACK, PUBREC, SUBACK of a persistent session) are sent only
after that. One batch per round of received packets (group commit) keeps the cost of a
durable write, a single fsync with `sync = "full"`, spread over many messages.

What is stored follows mosquitto's persist-sqlite model: a publication that must be kept for
later delivery is stored once (`messages`), and every session that should receive it gets a
small delivery row that references it (`deliveries`). Sessions, subscriptions, retained
publications and QoS 2 messages received but not yet released (`incoming`) complete the
broker's state. Separately, the append-only `journal` records every accepted publication
with a gap-free `seq`; it is what the Spark pipeline reads.

The broker allocates every identifier (message id, delivery id, journal seq) from counters
that `Store.load` returns at start-up, so a commit never waits to learn an id. Each counter
is one past the largest id any committed batch named, even when those rows have been deleted
or trimmed since, so an id is never used twice (a journal reader's checkpoint stays valid).
A commit may reorder ops of different tables (they commute) but never ops of one table.

Three implementations share one set of row codecs (`_codec`) and therefore one behaviour:
`SqliteStore` (default; WAL mode, damage-tolerant: a corrupt file or bad rows are moved aside
and reported, never a reason not to start), `PostgresStore` (a PostgreSQL database, the
``postgres`` extra: psycopg; imported only when asked for) and `MemoryStore` (tests,
ephemeral brokers). `open_store` picks one from configuration. Readers outside the broker
open the journal with `open_reader` (a `JournalReader` of a SQLite file, whose WAL means it
never blocks the broker's commits, or a reader of the PostgreSQL database), or by hand with
`open_journal_reader`.
"""

from __future__ import annotations

import os
from pathlib import Path

from .base import (
    ConsumerOffset,
    DeliveryRecord,
    DeliveryState,
    ForeignJournalRow,
    IncomingRecord,
    IncomingRow,
    JournalRecord,
    JournalRow,
    Op,
    RetainedRecord,
    RetainedRow,
    SessionRecord,
    Store,
    StoredMessage,
    StoreError,
    StoreState,
    StoreStats,
    SubscriptionRecord,
    SyncMode,
    WriteBatch,
)
from .journal_reader import (
    JournalLocation,
    JournalReader,
    JournalReaders,
    JournalReading,
    JournalRowValues,
    PackedRange,
    SubscriptionRow,
    open_reader,
)
from .memory import MemoryStore
from .postgres_connection import PSYCOPG_EXTRA, PostgresLocation
from .sqlite import DB_FILENAME, SqliteStore, open_journal_reader

__all__ = [
    "DB_FILENAME",
    "STORE_KINDS",
    "ConsumerOffset",
    "DeliveryRecord",
    "DeliveryState",
    "ForeignJournalRow",
    "IncomingRecord",
    "IncomingRow",
    "JournalLocation",
    "JournalReader",
    "JournalReaders",
    "JournalReading",
    "JournalRecord",
    "JournalRow",
    "JournalRowValues",
    "MemoryStore",
    "Op",
    "PackedRange",
    "PostgresLocation",
    "RetainedRecord",
    "RetainedRow",
    "SessionRecord",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreState",
    "StoreStats",
    "StoredMessage",
    "SubscriptionRecord",
    "SubscriptionRow",
    "SyncMode",
    "WriteBatch",
    "open_journal_reader",
    "open_reader",
    "open_store",
]

STORE_KINDS = ("sqlite", "memory", "postgres")


def open_store(
    kind: str,
    data_dir: str | os.PathLike[str] | None,
    sync: SyncMode | str = "full",
    origin: str = "",
    *,
    postgres: PostgresLocation | None = None,
) -> Store:
    """The store a configuration asks for; `origin`, the broker's name, is the origin of
    its own journal rows.

    `kind` is "sqlite" (the default of the configuration: `<data_dir>/telemq.db`, creating
    the directory), "postgres" (the database `postgres` names; `data_dir` is ignored) or
    "memory" (`data_dir` and `sync` are ignored). Raises ValueError for an unknown kind or
    sync mode, or a postgres store without a database, and StoreError when the store cannot
    be opened.
    """
    try:
        mode = SyncMode(sync)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in SyncMode)
        raise ValueError(f"unknown store sync mode {sync!r}; expected one of {choices}") from None
    if kind == "memory":
        return MemoryStore(origin=origin)
    if kind == "postgres":
        if postgres is None or not postgres.dsn:
            raise ValueError("the postgres store needs a dsn")
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise StoreError(f"the postgres store needs psycopg ({PSYCOPG_EXTRA}): {exc}") from None
        return PostgresStore(postgres, mode, origin)
    if kind != "sqlite":
        raise ValueError(f"unknown store kind {kind!r}; expected one of {STORE_KINDS}")
    if data_dir is None:
        raise ValueError("the sqlite store needs a data directory")
    directory = Path(data_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create data directory {directory}: {exc}") from exc
    return SqliteStore(directory / DB_FILENAME, mode, origin)
