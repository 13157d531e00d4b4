"""Records <-> rows, shared by both stores so that they cannot drift apart.

A *row* is a tuple of plain values in the column order of `COLUMNS[table]`: what the
SQLite store binds and reads back, and what the memory store keeps in its dicts. The
`*_row` builders are on the commit hot path and only build tuples; the `*_from_row`
decoders run at load time and validate every value, raising `BadRecord` for anything
the broker could not have written (the caller quarantines the row).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any

from .base import (
    DeliveryRecord,
    DeliveryState,
    IncomingRecord,
    IncomingRow,
    JournalRecord,
    RetainedRecord,
    RetainedRow,
    SessionRecord,
    StoredMessage,
    StoreState,
    SubscriptionRecord,
)

Row = tuple[Any, ...]
Blob = Callable[[bytes], bytes | bytearray]  # bytes (the same object) or bytearray (a copy)
# What each table is loaded sorted by, so that every store returns the same lists
# (PostgreSQL's key columns are COLLATE "C": names in byte order, as in SQLite).
LOAD_ORDER: dict[str, str] = {
    "sessions": "client_id",
    "subscriptions": "client_id, key",
    "retained": "sub_point, topic",
    "messages": "id",
    "deliveries": "delivery_id",
    "incoming": "client_id, packet_id",
}

COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(columns.split())
    for table, columns in {
        "sessions": "client_id data",
        "subscriptions": "client_id key data",
        "retained": "sub_point topic payload qos ts_us data properties local_only",
        "messages": "id topic payload qos retain sub_point client_id user_id ts_us properties"
        " expiry_at",
        "deliveries": "delivery_id client_id message_id qos state packet_id retain data",
        # The held message's columns in `messages` order (from message_id on), then released.
        "incoming": "client_id packet_id message_id topic payload qos retain sub_point"
        " msg_client_id user_id ts_us properties expiry_at released",
        "journal": "seq ts_us topic sub_point qos retain payload client_id user_id properties"
        " origin",
    }.items()
}

# `data` as compact, strict JSON (no NaN/Infinity: other readers of the file must parse it);
# builders skip the encoder for the common empty dict and store NULL.
encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class BadRecord(ValueError):
    """A stored row that cannot be turned back into a record; the message says why."""


# -- records -> rows (commit hot path: tuple building only) -----------------------------------
# Flags and enums go in as plain ints: the sqlite3 module binds exact int, float, str and
# bytearray directly, but looks up an adapter (a tuple, a dict probe, two attribute
# lookups) for anything else, a bool or an IntEnum included, while holding the GIL.
# `properties` (an MQTT 5.0 property block, opaque here) goes in as NULL when empty: MQTT
# 3.1.1 messages, nearly all of them, cost one byte of record header; NULL reads back as b"".
# `expiry_at` likewise goes in as NULL when 0.0 (never). A NaN goes in as the text "NaN":
# SQLite would bind the float as NULL (never expires), where the memory store's CHECK twin
# refuses it; as text, both refuse it like a negative value (a file whose column predates
# the CHECK keeps it and quarantines the row at load, as it does a negative value).
NAN_TEXT = "NaN"


def session_row(r: SessionRecord) -> Row:
    return (r.client_id, encode_json(r.data) if r.data else None)


def subscription_row(r: SubscriptionRecord) -> Row:
    return (r.client_id, r.key, encode_json(r.data) if r.data else None)


# The builders of the tables every QoS 1/2 or retained publication writes take how a row
# binds NULL and a blob: None and bytes as given for every store, 0 and bytearray for the
# SQLite store's statements, which turn 0 back into NULL (sqlite_writes.py, `BOUND_FAST`).


def retained_row(r: RetainedRecord, null: Any = None, blob: Blob = bytes) -> Row:
    properties = r.properties
    return (
        r.sub_point,
        r.topic,
        blob(r.payload),
        r.qos,
        r.ts_us,
        encode_json(r.data) if r.data else null,
        blob(properties) if properties else null,
        1 if r.local_only else null,  # NULL: every broker's (as in rows before schema 7)
    )


def retained_from_bound(row: RetainedRow) -> Row:
    """A `RetainedRow` (bound for SQLite: bytearrays, 0 for NULL) as `retained_row` makes
    it, for the stores that keep or bind plain values. Values of other types pass as they
    are, for `check_retained` to refuse."""
    sub_point, topic, payload, qos, ts_us, data, properties, local_only = row
    return (
        sub_point,
        topic,
        _unbound_blob(payload),
        qos,
        ts_us,
        _unbound_nullable(data),
        _unbound_nullable(properties),
        _unbound_nullable(local_only),
    )


def _unbound_blob(value: object) -> object:
    """A blob as bound (a bytearray) as the bytes the plain rows hold."""
    return bytes(value) if type(value) is bytearray else value


def _unbound_nullable(value: object) -> object:
    """A nullable column as bound: the 0 that stands for NULL (not False, 0.0 or b"") as
    None, a bytearray as bytes; anything else as it is."""
    if type(value) is int and value == 0:
        return None
    return _unbound_blob(value)


def message_row(m: StoredMessage, null: Any = None, blob: Blob = bytes) -> Row:
    expiry = m.expiry_at
    properties = m.properties
    return (
        m.id,
        m.topic,
        blob(m.payload),
        m.qos,
        1 if m.retain else 0,
        m.sub_point,
        m.client_id,
        m.user_id,
        m.ts_us,
        blob(properties) if properties else null,
        (expiry or null) if expiry == expiry else NAN_TEXT,
    )


def delivery_row(r: DeliveryRecord, null: Any = None) -> Row:
    return (
        r.delivery_id,
        r.client_id,
        r.message_id,
        r.qos,
        int(r.state),
        r.packet_id,
        1 if r.retain else 0,
        encode_json(r.data) if r.data else null,
    )


def incoming_row(r: IncomingRecord, null: Any = None, blob: Blob = bytes) -> Row:
    # The held message's columns are the `messages` table's, between the key and `released`.
    message = message_row(r.message, null, blob)
    return (r.client_id, r.packet_id, *message, 1 if r.released else 0)


def incoming_from_bound(row: IncomingRow) -> Row:
    """An `IncomingRow` (bound for SQLite) as `incoming_row` makes it, for the stores that
    keep or bind plain values; as `retained_from_bound`, other types pass for the check."""
    return (
        *row[:4],
        _unbound_blob(row[4]),  # payload
        *row[5:11],
        _unbound_nullable(row[11]),  # properties
        _unbound_nullable(row[12]),  # expiry_at
        row[13],
    )


# -- the CHECK constraints of the SQLite schema, for the memory store's commits ---------------


def _check(ok: bool, table: str, what: str, row: Row) -> None:
    if not ok:
        raise BadRecord(f"{table}: {what} is invalid in {row!r:.200}")


def _blob_or_null(value: object) -> bool:
    return value is None or type(value) is bytes


def _expiry_or_null(value: object) -> bool:
    """A REAL column's CHECK: SQLite stores an int (or bool) there as a real; NaN fails."""
    return value is None or (isinstance(value, int | float) and value >= 0)


def check_retained(row: Row) -> None:
    _check(type(row[2]) is bytes, "retained", "payload", row)
    _check(row[3] in (0, 1, 2), "retained", "qos", row)
    _check(_blob_or_null(row[6]), "retained", "properties", row)
    _check(row[7] is None or row[7] in (0, 1), "retained", "local_only", row)


def check_message(row: Row, table: str = "messages", at: int = 0) -> None:
    """`at`: where the message's columns start (incoming rows embed one at 2)."""
    _check(type(row[at + 2]) is bytes, table, "payload", row)
    _check(row[at + 3] in (0, 1, 2), table, "qos", row)
    _check(row[at + 4] in (0, 1), table, "retain", row)
    _check(_blob_or_null(row[at + 9]), table, "properties", row)
    _check(_expiry_or_null(row[at + 10]), table, "expiry_at", row)


def check_delivery(row: Row) -> None:
    _check(row[3] in (0, 1, 2), "deliveries", "qos", row)
    _check(row[4] in (0, 1, 2), "deliveries", "state", row)
    _check(type(row[5]) is int and 0 <= row[5] <= 65535, "deliveries", "packet_id", row)
    _check(row[6] in (0, 1), "deliveries", "retain", row)


def check_incoming(row: Row) -> None:
    _check(type(row[1]) is int and 1 <= row[1] <= 65535, "incoming", "packet_id", row)
    _check(row[13] in (0, 1), "incoming", "released", row)
    check_message(row, "incoming", 2)


def check_journal(row: Row) -> None:
    _check(row[4] in (0, 1, 2), "journal", "qos", row)
    _check(row[5] in (0, 1), "journal", "retain", row)
    _check(type(row[6]) is bytes, "journal", "payload", row)
    _check(_blob_or_null(row[9]), "journal", "properties", row)
    _check(row[10] is None or type(row[10]) is str, "journal", "origin", row)


# -- rows -> records (load: validate everything) --------------------------------------------
# Decoders index the row rather than unpack it, so callers may append extra columns (rowid).


def _text(value: object, name: str) -> str:
    if type(value) is not str:
        raise BadRecord(f"{name} is not text: {value!r}")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise BadRecord(f"{name} is not valid UTF-8: {value!r}") from None
    return value


def _int(value: object, name: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    if not isinstance(value, int) or not low <= value <= high:
        raise BadRecord(f"{name} is not an integer in {low}..{high}: {value!r}")
    return int(value)


def _qos(value: object) -> int:
    return _int(value, "qos", 0, 2)


def _flag(value: object, name: str) -> bool:
    if value not in (0, 1) or not isinstance(value, int):
        raise BadRecord(f"{name} is not 0 or 1: {value!r}")
    return bool(value)


def _payload(value: object) -> bytes:
    if type(value) is not bytes:
        raise BadRecord(f"payload is not a blob: {type(value).__name__}")
    return value


def _properties(value: object) -> bytes:
    if value is None:
        return b""
    if type(value) is not bytes:
        raise BadRecord(f"properties is not a blob or NULL: {type(value).__name__}")
    return value


def _flag_or_null(value: object, name: str) -> bool:
    """A flag column added to older files: NULL (every row they had) is false."""
    return False if value is None else _flag(value, name)


def _expiry(value: object) -> float:
    if value is None:
        return 0.0
    if not isinstance(value, int | float) or not value >= 0:  # NaN is not >= 0
        raise BadRecord(f"expiry_at is not a number >= 0 or NULL: {value!r:.100}")
    return float(value)


def decode_data(raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    text = _text(raw, "data")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BadRecord(f"data is not valid JSON ({exc})") from None
    if type(value) is not dict:
        raise BadRecord("data is not a JSON object")
    return value


def session_from_row(row: Sequence[object]) -> SessionRecord:
    return SessionRecord(_text(row[0], "client_id"), decode_data(row[1]))


def subscription_from_row(row: Sequence[object]) -> SubscriptionRecord:
    return SubscriptionRecord(_text(row[0], "client_id"), _text(row[1], "key"), decode_data(row[2]))


def retained_from_row(row: Sequence[object]) -> RetainedRecord:
    return RetainedRecord(
        _text(row[0], "sub_point"),
        _text(row[1], "topic"),
        _payload(row[2]),
        _qos(row[3]),
        _int(row[4], "ts_us"),
        decode_data(row[5]),
        _properties(row[6]),
        _flag_or_null(row[7], "local_only"),
    )


def message_from_row(row: Sequence[object]) -> StoredMessage:
    return StoredMessage(
        _int(row[0], "id"),
        _text(row[1], "topic"),
        _payload(row[2]),
        _qos(row[3]),
        _flag(row[4], "retain"),
        _text(row[5], "sub_point"),
        _text(row[6], "client_id"),
        _text(row[7], "user_id"),
        _int(row[8], "ts_us"),
        _properties(row[9]),
        _expiry(row[10]),
    )


def delivery_from_row(row: Sequence[object]) -> DeliveryRecord:
    state = _int(row[4], "state", 0, 2)
    return DeliveryRecord(
        _int(row[0], "delivery_id"),
        _text(row[1], "client_id"),
        _int(row[2], "message_id"),
        _qos(row[3]),
        DeliveryState(state),
        _int(row[5], "packet_id", 0, 65535),
        _flag(row[6], "retain"),
        decode_data(row[7]),
    )


def incoming_from_row(row: Sequence[object]) -> IncomingRecord:
    return IncomingRecord(
        _text(row[0], "client_id"),
        _int(row[1], "packet_id", 1, 65535),
        message_from_row(row[2:]),
        _flag(row[13], "released"),
    )


def journal_from_trusted_row(row: Row) -> JournalRecord:
    """A journal row as `read_journal` returns it: not validated (the journal is not loaded
    at start-up, and CHECK constraints guard what goes in); NULL properties are b"", a NULL
    origin (a row written before schema 6) ""."""
    return JournalRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        bool(row[5]),
        row[6],
        row[7],
        row[8],
        row[9] or b"",
        row[10] or "",
    )


def row_json(table: str, row: Sequence[object]) -> str:
    """A quarantined row as JSON text, readable without telemq (blobs as base64)."""

    def plain(value: object) -> object:
        if isinstance(value, bytes | bytearray | memoryview):
            return {"base64": base64.b64encode(value).decode("ascii")}
        if value is None or isinstance(value, int | float | str):
            return value
        return repr(value)

    # ASCII-only: the row may hold text that is not valid UTF-8 (as surrogate escapes).
    columns = COLUMNS[table]  # the row may carry extra columns (rowid): zip drops them
    return json.dumps({name: plain(value) for name, value in zip(columns, row, strict=False)})


def link_deliveries(
    messages: dict[int, StoredMessage], deliveries: list[DeliveryRecord]
) -> tuple[list[DeliveryRecord], list[DeliveryRecord], list[int]]:
    """Split deliveries into those whose message exists and dangling ones, and list orphans.

    Returns (kept deliveries, dangling deliveries, ids of messages no delivery references).
    Orphans are garbage, not damage: the broker deletes a message in the batch that deletes
    its last delivery, but nothing forces it to.
    """
    kept: list[DeliveryRecord] = []
    dangling: list[DeliveryRecord] = []
    referenced: set[int] = set()
    for d in deliveries:
        if d.message_id in messages:
            kept.append(d)
            referenced.add(d.message_id)
        else:
            dangling.append(d)
    orphans = [mid for mid in messages if mid not in referenced]
    return kept, dangling, orphans


def decode_state(
    rows_of: Callable[[str], Sequence[Sequence[object]]],
) -> tuple[StoreState, list[tuple[str, Row, str]], list[int]]:
    """The broker's state from the rows `rows_of(table)` gives (each with its key appended),
    for every store alike: (the state, the rows that failed to decode with why, the ids of
    messages no delivery references). The store sets the bad rows and orphans aside."""
    bad: list[tuple[str, Row, str]] = []

    def decode(table: str, from_row: Callable[[Sequence[object]], Any]) -> list[Any]:
        records = []
        for row in rows_of(table):
            try:
                records.append(from_row(row))
            except BadRecord as exc:
                bad.append((table, tuple(row), str(exc)))
        return records

    state = StoreState(
        sessions=decode("sessions", session_from_row),
        subscriptions=decode("subscriptions", subscription_from_row),
        retained=decode("retained", retained_from_row),
        messages={m.id: m for m in decode("messages", message_from_row)},
        incoming=decode("incoming", incoming_from_row),
    )
    deliveries = decode("deliveries", delivery_from_row)
    state.deliveries, dangling, orphans = link_deliveries(state.messages, deliveries)
    for d in dangling:
        bad.append(
            ("deliveries", (*delivery_row(d), d.delivery_id), f"message {d.message_id} is missing")
        )
    for message_id in orphans:
        del state.messages[message_id]
    return state, bad, orphans
