"""`MemoryStore`: the store contract without a disk, for tests and ephemeral brokers.

It keeps the same rows the SQLite store writes (built by the same `_codec` functions) and
enforces the same CHECK constraints, so the two stores agree on everything a caller can
observe: a record's `data` goes through JSON on commit and back on load, which both
snapshots it (the broker keeps mutating its own objects) and gives the values SQLite would.
Atomicity comes from an undo log: every mutation of a batch records how to reverse itself,
and a failing batch is unwound.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from . import _codec
from ._codec import Row
from .base import (
    ConsumerOffset,
    DeliveryRecord,
    IncomingRecord,
    IncomingRow,
    JournalRecord,
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
    WriteBatch,
)

log = logging.getLogger("telemq.store")

_MISSING: Any = object()
Undo = list[Callable[[], object]]


def _restore(table: dict[Any, Any], key: object, old: object) -> None:
    if old is _MISSING:
        table.pop(key, None)
    else:
        table[key] = old


def _put(table: dict[Any, Any], key: object, value: object, undo: Undo) -> None:
    undo.append(partial(_restore, table, key, table.get(key, _MISSING)))
    table[key] = value


def _pop(table: dict[Any, Any], key: object, undo: Undo) -> None:
    old = table.pop(key, _MISSING)
    if old is not _MISSING:
        undo.append(partial(_restore, table, key, old))


def _inner(table: dict[Any, dict[Any, Any]], key: object, undo: Undo) -> dict[Any, Any]:
    """The nested dict at `key`, created (undoably) if missing."""
    inner = table.get(key)
    if inner is None:
        inner = {}
        _put(table, key, inner, undo)
    return inner


@dataclass
class _Contents:
    """Everything a MemoryStore holds; shared by the stores that `reopen` returns."""

    sessions: dict[str, Row] = field(default_factory=dict)
    subscriptions: dict[str, dict[str, Row]] = field(default_factory=dict)  # client -> key
    retained: dict[tuple[str, str], Row] = field(default_factory=dict)
    messages: dict[int, Row] = field(default_factory=dict)
    deliveries: dict[int, Row] = field(default_factory=dict)
    deliveries_by_client: dict[str, dict[int, None]] = field(default_factory=dict)
    incoming: dict[str, dict[int, Row]] = field(default_factory=dict)  # client -> packet id
    journal: dict[int, Row] = field(default_factory=dict)
    journal_seqs: list[int] = field(default_factory=list)  # sorted, for range reads
    offsets: dict[str, ConsumerOffset] = field(default_factory=dict)  # consumer offsets
    # High-water marks: one past the largest id a committed batch named (put or deleted), so
    # ids are never reused; the SQLite store follows the same rule.
    next_seq: int = 1
    next_message_id: int = 1
    next_delivery_id: int = 1
    quarantined: int = 0


class MemoryStore(Store):
    """Keeps the durable state in dicts; see the module docstring."""

    def __init__(self, contents: _Contents | None = None, origin: str = "") -> None:
        """`origin`: the broker's name, the origin of its own journal rows."""
        self._c = _Contents() if contents is None else contents
        self._closed = False
        self._origin = origin or None

    def reopen(self) -> MemoryStore:
        """A new store over the same contents, as a broker restart would see them (tests)."""
        return MemoryStore(self._c, self._origin or "")

    # -- Store API ------------------------------------------------------------------------

    def load(self) -> StoreState:
        self._check_open()
        c = self._c
        messages = {mid: _codec.message_from_row(c.messages[mid]) for mid in sorted(c.messages)}
        deliveries = [_codec.delivery_from_row(c.deliveries[i]) for i in sorted(c.deliveries)]
        kept, dangling, orphans = _codec.link_deliveries(messages, deliveries)
        undo: Undo = []  # cleanup is never undone; the helpers just need a log
        for d in dangling:
            log.warning(
                "quarantined delivery %d of %r: message %d is missing",
                d.delivery_id,
                d.client_id,
                d.message_id,
            )
            self._delete_delivery(d.delivery_id, undo)
        for mid in orphans:
            del c.messages[mid]
            del messages[mid]
        c.quarantined += len(dangling)
        return StoreState(
            sessions=[_codec.session_from_row(c.sessions[k]) for k in sorted(c.sessions)],
            subscriptions=[
                _codec.subscription_from_row(row)
                for _, subs in sorted(c.subscriptions.items())
                for _, row in sorted(subs.items())
            ],
            retained=[_codec.retained_from_row(c.retained[k]) for k in sorted(c.retained)],
            messages=messages,
            deliveries=kept,
            incoming=[
                _codec.incoming_from_row(row)
                for _, rows in sorted(c.incoming.items())
                for _, row in sorted(rows.items())
            ],
            next_seq=c.next_seq,
            next_message_id=c.next_message_id,
            next_delivery_id=c.next_delivery_id,
            quarantined=len(dangling),
        )

    def commit(self, batch: WriteBatch) -> None:
        self._check_open()
        if not batch:
            return
        c = self._c
        counters = (c.next_seq, c.next_message_id, c.next_delivery_id)
        undo: Undo = []
        try:
            for op, args in batch.ops:
                self._APPLY[op](self, args, undo)
            for row in batch.journal_rows():
                self._append_journal((*row, self._origin), undo)
            for foreign in batch.journal_foreign:
                self._append_journal(foreign, undo)
        except Exception as exc:
            for step in reversed(undo):
                step()
            c.next_seq, c.next_message_id, c.next_delivery_id = counters
            raise StoreError(f"commit failed, nothing applied: {exc}") from exc

    def read_journal(
        self, start_seq: int, end_seq: int, limit: int | None = None
    ) -> list[JournalRecord]:
        self._check_open()
        seqs = self._c.journal_seqs
        lo = bisect.bisect_left(seqs, start_seq)
        hi = bisect.bisect_left(seqs, end_seq, lo)
        if limit is not None:
            hi = min(hi, lo + max(limit, 0))
        journal = self._c.journal
        return [_codec.journal_from_trusted_row(journal[s]) for s in seqs[lo:hi]]

    def trim_journal(self, before_seq: int) -> int:
        self._check_open()
        c = self._c
        cut = bisect.bisect_left(c.journal_seqs, before_seq)
        for seq in c.journal_seqs[:cut]:
            del c.journal[seq]
        del c.journal_seqs[:cut]
        return cut

    def journal_seq_since(self, ts_us: int) -> int | None:
        self._check_open()
        c = self._c
        for seq in c.journal_seqs:
            if c.journal[seq][1] >= ts_us:  # rows are in JournalRow order: seq, ts_us, ...
                return seq
        return None

    def stats(self) -> StoreStats:
        self._check_open()
        c = self._c
        seqs = c.journal_seqs
        return StoreStats(
            bytes_on_disk=0,
            journal_rows=len(seqs),
            journal_first_seq=seqs[0] if seqs else 0,
            journal_last_seq=seqs[-1] if seqs else 0,
            messages=len(c.messages),
            deliveries=len(c.deliveries),
            quarantined=c.quarantined,
        )

    def put_consumer_offset(self, offset: ConsumerOffset) -> None:
        self._check_open()
        self._c.offsets[offset.name] = ConsumerOffset(
            offset.name, offset.owner, offset.committed_seq, offset.running, offset.updated_us
        )

    def delete_consumer_offset(self, name: str) -> bool:
        self._check_open()
        return self._c.offsets.pop(name, None) is not None

    def consumer_offsets(self) -> list[ConsumerOffset]:
        self._check_open()
        return [self._c.offsets[name] for name in sorted(self._c.offsets)]

    def close(self) -> None:
        self._closed = True

    # -- operations -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    def _put_session(self, args: tuple[SessionRecord], undo: Undo) -> None:
        row = _codec.session_row(args[0])
        _put(self._c.sessions, row[0], row, undo)

    def _delete_session(self, args: tuple[str], undo: Undo) -> None:
        client_id = args[0]
        c = self._c
        _pop(c.sessions, client_id, undo)
        _pop(c.subscriptions, client_id, undo)
        _pop(c.incoming, client_id, undo)
        for delivery_id in list(c.deliveries_by_client.get(client_id, ())):
            self._delete_delivery(delivery_id, undo)

    def _put_subscription(self, args: tuple[SubscriptionRecord], undo: Undo) -> None:
        row = _codec.subscription_row(args[0])
        _put(_inner(self._c.subscriptions, row[0], undo), row[1], row, undo)

    def _delete_subscription(self, args: tuple[str, str], undo: Undo) -> None:
        client_id, key = args
        subs = self._c.subscriptions.get(client_id)
        if subs is not None:
            _pop(subs, key, undo)
            if not subs:
                _pop(self._c.subscriptions, client_id, undo)

    def _put_retained(self, args: tuple[RetainedRecord], undo: Undo) -> None:
        self._keep_retained(_codec.retained_row(args[0]), undo)

    def _put_retained_row(self, args: tuple[RetainedRow], undo: Undo) -> None:
        self._keep_retained(_codec.retained_from_bound(args[0]), undo)

    def _keep_retained(self, row: _codec.Row, undo: Undo) -> None:
        _codec.check_retained(row)
        _put(self._c.retained, (row[0], row[1]), row, undo)

    def _delete_retained(self, args: tuple[str, str], undo: Undo) -> None:
        _pop(self._c.retained, args, undo)

    def _put_message(self, args: tuple[StoredMessage], undo: Undo) -> None:
        row = _codec.message_row(args[0])
        _codec.check_message(row)
        if row[0] in self._c.messages:
            return  # messages are immutable: the stored one stays
        _put(self._c.messages, row[0], row, undo)
        self._c.next_message_id = max(self._c.next_message_id, row[0] + 1)

    def _delete_message(self, args: tuple[int], undo: Undo) -> None:
        _pop(self._c.messages, args[0], undo)
        self._c.next_message_id = max(self._c.next_message_id, args[0] + 1)

    def _put_delivery(self, args: tuple[DeliveryRecord], undo: Undo) -> None:
        row = _codec.delivery_row(args[0])
        _codec.check_delivery(row)
        delivery_id, client_id = row[0], row[1]
        self._delete_delivery(delivery_id, undo)  # it may move to another client
        _put(self._c.deliveries, delivery_id, row, undo)
        _put(_inner(self._c.deliveries_by_client, client_id, undo), delivery_id, None, undo)
        self._c.next_delivery_id = max(self._c.next_delivery_id, delivery_id + 1)

    def _delete_delivery(self, delivery_id: int, undo: Undo) -> None:
        c = self._c
        row = c.deliveries.get(delivery_id)
        if row is None:
            return
        _pop(c.deliveries, delivery_id, undo)
        ids = c.deliveries_by_client[row[1]]
        _pop(ids, delivery_id, undo)
        if not ids:
            _pop(c.deliveries_by_client, row[1], undo)

    def _delete_delivery_op(self, args: tuple[int], undo: Undo) -> None:
        self._delete_delivery(args[0], undo)
        self._c.next_delivery_id = max(self._c.next_delivery_id, args[0] + 1)

    def _put_incoming(self, args: tuple[IncomingRecord], undo: Undo) -> None:
        self._keep_incoming(_codec.incoming_row(args[0]), undo)

    def _put_incoming_row(self, args: tuple[IncomingRow], undo: Undo) -> None:
        self._keep_incoming(_codec.incoming_from_bound(args[0]), undo)

    def _keep_incoming(self, row: _codec.Row, undo: Undo) -> None:
        _codec.check_incoming(row)
        _put(_inner(self._c.incoming, row[0], undo), row[1], row, undo)
        self._c.next_message_id = max(self._c.next_message_id, row[2] + 1)

    def _delete_incoming(self, args: tuple[str, int], undo: Undo) -> None:
        client_id, packet_id = args
        rows = self._c.incoming.get(client_id)
        if rows is not None:
            _pop(rows, packet_id, undo)
            if not rows:
                _pop(self._c.incoming, client_id, undo)

    def _release_incoming(self, args: tuple[str, int], undo: Undo) -> None:
        client_id, packet_id = args
        rows = self._c.incoming.get(client_id)
        row = rows.get(packet_id) if rows is not None else None
        if rows is not None and row is not None:
            _put(rows, packet_id, (*row[:-1], 1), undo)  # released: the last column

    def _append_journal(self, row: tuple[Any, ...], undo: Undo) -> None:
        """A `ForeignJournalRow` (origin None: none)."""
        # Kept as the SQLite store writes them: bytes, and NULL for no properties (0).
        payload, properties = row[6], row[9]
        if type(properties) is bytearray:
            properties = bytes(properties)
        elif properties == 0 and type(properties) is int:
            properties = None
        if type(payload) is bytearray:
            payload = bytes(payload)
        row = (*row[:6], payload, row[7], row[8], properties, row[10])
        _codec.check_journal(row)
        seq: int = row[0]
        c = self._c
        if seq in c.journal:
            raise StoreError(f"journal seq {seq} already exists")
        _put(c.journal, seq, row, undo)
        seqs = c.journal_seqs
        if not seqs or seq > seqs[-1]:
            seqs.append(seq)
            undo.append(seqs.pop)
        else:
            bisect.insort(seqs, seq)
            undo.append(partial(seqs.remove, seq))
        c.next_seq = max(c.next_seq, seq + 1)

    _APPLY: ClassVar[dict[Op, Callable[[MemoryStore, Any, Undo], None]]] = {
        Op.PUT_SESSION: _put_session,
        Op.DELETE_SESSION: _delete_session,
        Op.PUT_SUBSCRIPTION: _put_subscription,
        Op.DELETE_SUBSCRIPTION: _delete_subscription,
        Op.PUT_RETAINED: _put_retained,
        Op.PUT_RETAINED_ROW: _put_retained_row,
        Op.DELETE_RETAINED: _delete_retained,
        Op.PUT_MESSAGE: _put_message,
        Op.DELETE_MESSAGE: _delete_message,
        Op.PUT_DELIVERY: _put_delivery,
        Op.DELETE_DELIVERY: _delete_delivery_op,
        Op.PUT_INCOMING: _put_incoming,
        Op.PUT_INCOMING_ROW: _put_incoming_row,
        Op.DELETE_INCOMING: _delete_incoming,
        Op.RELEASE_INCOMING: _release_incoming,
    }
