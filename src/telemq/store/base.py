"""The store contract: what the broker persists, and how.

Theory of operation
-------------------
The broker keeps its working state in memory and uses the store as a durable
mirror. Every change the broker must not lose is appended to a `WriteBatch`
(an ordered list of operations); the broker hands the batch to `Store.commit`,
which applies every operation of the batch in one transaction and returns only
once the transaction is durable (as durable as the `sync` setting says). Only
then does the broker send the acknowledgements that depended on the batch. This
is group commit: one transaction per batch of received packets, never one per
message.

At start-up `Store.load()` returns everything needed to rebuild the broker's
memory: sessions, subscriptions, retained messages, stored messages and the
deliveries that reference them, QoS 2 messages received but not yet released,
and the next journal sequence number.

Identifiers are chosen by the broker, not the store: message ids, delivery ids
and journal `seq` values are allocated in memory from the counters that `load`
returns, so a batch never needs a round trip to learn an id. Operations are
applied in the order they were added, so "delete session X, then create session
X" in one batch does what it says.

A store is used from one thread at a time (the broker's writer thread).
Journal readers (the Spark pipeline) open their own read-only connection.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast


class SyncMode(enum.StrEnum):
    """How hard a commit pushes data to disk (SQLite's `synchronous`)."""

    FULL = "full"  # fsync on every commit: nothing acknowledged is lost, even on power loss
    NORMAL = "normal"  # WAL + fsync at checkpoints: survives a process crash, not power loss
    OFF = "off"  # no fsync: survives a process crash on most systems, fastest


@dataclass(slots=True)
class StoredMessage:
    """A publication kept for later delivery (referenced by deliveries).

    `properties`: the MQTT 5.0 PUBLISH property block without its leading Property Length,
    opaque to the store (the broker encodes and decodes it); b"" for none (every MQTT 3.1.1
    message), stored as NULL.
    """

    id: int
    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    sub_point: str = ""
    client_id: str = ""
    user_id: str = ""
    ts_us: int = 0  # broker receive time, UTC microseconds
    properties: bytes = b""
    expiry_at: float = 0.0  # MQTT 5.0 expiry: UTC seconds after which it is gone; 0 = never


@dataclass(slots=True)
class JournalRecord:
    """One accepted publication in the append-only journal (design §8). `properties`: as in
    `StoredMessage` (the forwarded MQTT 5.0 properties without a length; b"" for none)."""

    seq: int
    ts_us: int
    topic: str
    sub_point: str
    qos: int
    retain: bool
    payload: bytes
    client_id: str
    user_id: str
    properties: bytes = b""
    # The broker the publication was made at (docs/network.md §6). Written: "" for this
    # broker's own (the store writes its name). Read: "" for rows older than schema 6.
    origin: str = ""


JournalRow = tuple[
    int, int, str, str, int, int, bytes | bytearray, str, str, bytes | bytearray | int | None
]
"""A journal record's fields in column order: seq, ts_us, topic, sub_point, qos, retain,
payload, client_id, user_id, properties (as in `JournalRecord`; 0 or None for none): a
publication made at this broker, whose `origin` the store writes itself (its own name,
given when it is opened: nothing to bind per row). For
the fastest commit, retain is 0 or 1, the payload and properties bytearrays and no
properties 0: the sqlite3 module binds exact ints and bytearrays directly, a bool, bytes or
None only after looking up an adapter (which, at one row per publication, costs about half
of what the writer thread spends holding the GIL; a None alone would cost three times what
the column costs). The store writes 0 as NULL, and `Store.read_journal` gives payloads back
as bytes and no properties as b""."""
ForeignJournalRow = tuple[
    int, int, str, str, int, int, bytes | bytearray, str, str, bytes | bytearray | int | None, str
]
"""A `JournalRow` and the name of the broker the publication was made at."""
JOURNAL_FIELDS = 10  # values per row in `WriteBatch.journal`
JOURNAL_CHUNK_ROWS = 2048  # rows per sealed chunk of `WriteBatch.journal_chunks`


@dataclass(slots=True)
class SessionRecord:
    """A persistent session. `data` holds broker-defined attributes (JSON-able)."""

    client_id: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SubscriptionRecord:
    """A subscription of a session; `key` is unique per client (e.g. the topic filter)."""

    client_id: str
    key: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RetainedRecord:
    """The retained publication of one topic at one subscription point. `properties`: as in
    `StoredMessage` (the MQTT 5.0 property block without its length; b"" for none).
    `local_only`: its scope is this broker (an MQ Publish with PubOpt Local): the other
    brokers of a network never get it, across restarts too."""

    sub_point: str
    topic: str
    payload: bytes
    qos: int
    ts_us: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    properties: bytes = b""
    local_only: bool = False


RetainedRow = tuple[str, str, bytes | bytearray, int, int, str | int, bytes | bytearray | int, int]
"""A retained publication as the broker hands it over (`WriteBatch.put_retained_row`): the
`retained` table's columns in order, sub_point, topic, payload, qos, ts_us, data (the JSON
text of `RetainedRecord.data`), properties, local_only, bound the way `JournalRow` is, for
the same reason: the payload and properties bytearrays, 0 for no data, no properties and
not local_only (1 for local_only). One per retained publication: made from the broker's
own message, it costs no record object, no `data` dict and no conversion on the writer
thread. The stores read it back as a `RetainedRecord`."""


class DeliveryState(enum.IntEnum):
    QUEUED = 0  # not yet sent to the client
    INFLIGHT = 1  # PUBLISH sent with `packet_id`, waiting for PUBACK / PUBREC
    RELEASED = 2  # QoS 2: PUBREC received, PUBREL sent, waiting for PUBCOMP


@dataclass(slots=True)
class DeliveryRecord:
    """One outbound copy of a stored message for one session.

    `delivery_id` is unique across the store and increases in queue order, so
    loading deliveries ordered by it restores each session's queue order.
    """

    delivery_id: int
    client_id: str
    message_id: int
    qos: int
    state: DeliveryState = DeliveryState.QUEUED
    packet_id: int = 0
    retain: bool = False
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class IncomingRecord:
    """A QoS 2 PUBLISH received (PUBREC sent) and not yet released by PUBREL; or, with
    `released`, one already released, kept so that a client re-sending it after losing the
    PUBCOMP is recognised (docs/reliability.md, "QoS 2 step by step")."""

    client_id: str
    packet_id: int
    message: StoredMessage
    released: bool = False


IncomingRow = tuple[
    str,
    int,
    int,
    str,
    bytes | bytearray,
    int,
    int,
    str,
    str,
    str,
    int,
    bytes | bytearray | int,
    float | int,
    int,
]
"""A held QoS 2 message as the broker hands it over (`WriteBatch.put_incoming_row`): the
`incoming` table's columns in order, client_id, packet_id, then the message's (message_id,
topic, payload, qos, retain, sub_point, client_id, user_id, ts_us, properties, expiry_at),
then released, bound the way `JournalRow` is: the payload and properties bytearrays, 0 for
no properties and no expiry, retain and released as 1 or 0. One per QoS 2 publication:
made from the broker's own message, it costs no `StoredMessage` and no `IncomingRecord`,
and nothing to convert on the writer thread. The stores read it back as an
`IncomingRecord`."""


@dataclass(slots=True)
class StoreState:
    """Everything `Store.load` returns to rebuild the broker after a restart."""

    sessions: list[SessionRecord] = field(default_factory=list)
    subscriptions: list[SubscriptionRecord] = field(default_factory=list)
    retained: list[RetainedRecord] = field(default_factory=list)
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    deliveries: list[DeliveryRecord] = field(default_factory=list)  # ordered by delivery_id
    incoming: list[IncomingRecord] = field(default_factory=list)
    next_seq: int = 1  # next journal seq (max seq + 1)
    next_message_id: int = 1
    next_delivery_id: int = 1
    quarantined: int = 0  # damaged records set aside during load


class Op(enum.IntEnum):
    """Operations of a `WriteBatch`; each has a fixed argument shape (see WriteBatch)."""

    PUT_SESSION = 1  # (SessionRecord,)
    DELETE_SESSION = 2  # (client_id,): also its subscriptions, deliveries, incoming
    PUT_SUBSCRIPTION = 3  # (SubscriptionRecord,)
    DELETE_SUBSCRIPTION = 4  # (client_id, key)
    PUT_RETAINED = 5  # (RetainedRecord,)
    DELETE_RETAINED = 6  # (sub_point, topic)
    PUT_MESSAGE = 7  # (StoredMessage,)
    DELETE_MESSAGE = 8  # (message_id,)
    PUT_DELIVERY = 9  # (DeliveryRecord,) insert or replace
    DELETE_DELIVERY = 10  # (delivery_id,)
    PUT_INCOMING = 11  # (IncomingRecord,) insert or replace
    DELETE_INCOMING = 12  # (client_id, packet_id)
    RELEASE_INCOMING = 13  # (client_id, packet_id): the held message's row, marked released
    PUT_RETAINED_ROW = 14  # (RetainedRow,): PUT_RETAINED, as the broker makes it
    PUT_INCOMING_ROW = 15  # (IncomingRow,): PUT_INCOMING, as the broker makes it


class WriteBatch:
    """An ordered list of store operations, committed atomically by `Store.commit`.

    Journal rows are kept apart from `ops`, flattened into lists of values
    (`JOURNAL_FIELDS` per row, in `JournalRow` order): one row per publication makes them
    most of what the broker writes, and plain values cost no object per row and no
    reshaping on the writer thread. `seal_journal` moves whole chunks of
    `JOURNAL_CHUNK_ROWS` rows into tuples, which the garbage collector stops scanning
    (a tuple of plain values is untracked), so a large batch waiting for the writer costs
    no collection time. Journal rows commute with every op (another table), so where they
    go in the batch does not matter.
    """

    __slots__ = ("journal", "journal_chunks", "journal_foreign", "ops")

    def __init__(self) -> None:
        self.ops: list[tuple[Op, tuple[Any, ...]]] = []
        self.journal: list[Any] = []
        self.journal_chunks: list[tuple[Any, ...]] = []
        # Rows of publications made at other brokers (`JournalRow` + their origin): few,
        # and written by a statement of their own.
        self.journal_foreign: list[ForeignJournalRow] = []

    def __len__(self) -> int:
        return (
            len(self.ops)
            + len(self.journal) // JOURNAL_FIELDS
            + len(self.journal_chunks) * JOURNAL_CHUNK_ROWS
            + len(self.journal_foreign)
        )

    def __bool__(self) -> bool:
        return (
            bool(self.ops)
            or bool(self.journal)
            or bool(self.journal_chunks)
            or bool(self.journal_foreign)
        )

    def seal_journal(self) -> None:
        """Move whole chunks of journal rows into tuples (see the class docstring)."""
        values = self.journal
        width = JOURNAL_CHUNK_ROWS * JOURNAL_FIELDS
        if len(values) < width:
            return
        whole = len(values) - len(values) % width
        self.journal_chunks.extend(tuple(values[i : i + width]) for i in range(0, whole, width))
        del values[:whole]

    def journal_values(self) -> list[Sequence[Any]]:
        """The journal rows' values: the sealed chunks, then the rest."""
        return [*self.journal_chunks, self.journal] if self.journal else list(self.journal_chunks)

    def journal_rows(self) -> list[JournalRow]:
        return [
            cast(JournalRow, tuple(values[i : i + JOURNAL_FIELDS]))
            for values in self.journal_values()
            for i in range(0, len(values), JOURNAL_FIELDS)
        ]

    def put_session(self, record: SessionRecord) -> None:
        self.ops.append((Op.PUT_SESSION, (record,)))

    def delete_session(self, client_id: str) -> None:
        self.ops.append((Op.DELETE_SESSION, (client_id,)))

    def put_subscription(self, record: SubscriptionRecord) -> None:
        self.ops.append((Op.PUT_SUBSCRIPTION, (record,)))

    def delete_subscription(self, client_id: str, key: str) -> None:
        self.ops.append((Op.DELETE_SUBSCRIPTION, (client_id, key)))

    def put_retained(self, record: RetainedRecord) -> None:
        self.ops.append((Op.PUT_RETAINED, (record,)))

    def put_retained_row(self, row: RetainedRow) -> None:
        """`put_retained` of a row (the broker's way: one per retained publication)."""
        self.ops.append((Op.PUT_RETAINED_ROW, (row,)))

    def delete_retained(self, sub_point: str, topic: str) -> None:
        self.ops.append((Op.DELETE_RETAINED, (sub_point, topic)))

    def put_message(self, message: StoredMessage) -> None:
        self.ops.append((Op.PUT_MESSAGE, (message,)))

    def delete_message(self, message_id: int) -> None:
        self.ops.append((Op.DELETE_MESSAGE, (message_id,)))

    def put_delivery(self, record: DeliveryRecord) -> None:
        self.ops.append((Op.PUT_DELIVERY, (record,)))

    def delete_delivery(self, delivery_id: int) -> None:
        self.ops.append((Op.DELETE_DELIVERY, (delivery_id,)))

    def put_incoming(self, record: IncomingRecord) -> None:
        self.ops.append((Op.PUT_INCOMING, (record,)))

    def put_incoming_row(self, row: IncomingRow) -> None:
        """`put_incoming` of a row (the broker's way: one per QoS 2 publication)."""
        self.ops.append((Op.PUT_INCOMING_ROW, (row,)))

    def delete_incoming(self, client_id: str, packet_id: int) -> None:
        self.ops.append((Op.DELETE_INCOMING, (client_id, packet_id)))

    def release_incoming(self, client_id: str, packet_id: int) -> None:
        """Mark a held QoS 2 message released, in place (`IncomingRecord.released`)."""
        self.ops.append((Op.RELEASE_INCOMING, (client_id, packet_id)))

    def append_journal(self, record: JournalRecord) -> None:
        """A record; with an `origin`, a foreign row (else the store writes its own name)."""
        row: JournalRow = (
            record.seq,
            record.ts_us,
            record.topic,
            record.sub_point,
            record.qos,
            1 if record.retain else 0,
            bytearray(record.payload),
            record.client_id,
            record.user_id,
            bytearray(record.properties) if record.properties else 0,
        )
        if record.origin:
            self.journal_foreign.append((*row, record.origin))
        else:
            self.journal += row

    def append_journal_row(self, row: JournalRow) -> None:
        """`append_journal` without a record object (the broker's hottest write)."""
        self.journal += row

    def append_foreign_journal_row(self, row: ForeignJournalRow) -> None:
        """The row of a publication made at the broker `row[-1]` (a link's copy)."""
        self.journal_foreign.append(row)


@dataclass(slots=True)
class ConsumerOffset:
    """How far a journal reader over the network (a streaming query) has committed.

    Kept by the broker for its journal service, so that retention can honour readers whose
    files are on other hosts (`consumers.offsets_floor`). `committed_seq` None: the reader has
    not committed yet (nothing may be trimmed); `updated_us`: the broker's clock at the last
    write, the reader's heartbeat.
    """

    name: str
    owner: str  # the broker user that wrote it first ("" anonymous)
    committed_seq: int | None
    running: bool
    updated_us: int


@dataclass(slots=True)
class StoreStats:
    """Sizes reported in $SYS."""

    bytes_on_disk: int = 0
    journal_rows: int = 0
    journal_first_seq: int = 0
    journal_last_seq: int = 0
    messages: int = 0
    deliveries: int = 0
    quarantined: int = 0


class StoreError(Exception):
    """The store could not do what was asked (I/O error, full disk, closed store)."""


class Store(ABC):
    """Durable broker state. See the module docstring for the contract."""

    # Seconds the last commit spent making itself durable (SQLite's COMMIT: the fsync with
    # `sync = "full"`), for the broker's metrics; 0 for a store that has nothing to sync.
    last_sync_seconds: float = 0.0

    @abstractmethod
    def load(self) -> StoreState:
        """Read the whole durable state (called once, at start-up, before any commit)."""

    @abstractmethod
    def commit(self, batch: WriteBatch) -> None:
        """Apply every operation of `batch` atomically and durably, or raise StoreError.

        When it raises, nothing of the batch is applied.
        """

    @abstractmethod
    def read_journal(
        self, start_seq: int, end_seq: int, limit: int | None = None
    ) -> list[JournalRecord]:
        """Journal records with start_seq <= seq < end_seq, in seq order."""

    @abstractmethod
    def trim_journal(self, before_seq: int) -> int:
        """Delete journal records with seq < before_seq; returns how many were deleted."""

    @abstractmethod
    def journal_seq_since(self, ts_us: int) -> int | None:
        """The first seq received at or after `ts_us` (None if there is none): the age cut
        of retention. Receive times follow seq order (one broker clock)."""

    @abstractmethod
    def put_consumer_offset(self, offset: ConsumerOffset) -> None:
        """Create or replace the offset named `offset.name`, durably (its own transaction:
        offsets come from the journal service, not from the broker's write batches)."""

    @abstractmethod
    def delete_consumer_offset(self, name: str) -> bool:
        """Delete the offset `name`; whether there was one."""

    @abstractmethod
    def consumer_offsets(self) -> list[ConsumerOffset]:
        """Every consumer offset, by name."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Current sizes, cheap enough to call every few seconds."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release resources; later calls raise StoreError."""
