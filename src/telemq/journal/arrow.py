"""The journal as Arrow: seq ranges of a broker's store read into record batches.

Theory of operation
-------------------
One encoding of journal rows serves every reader: the broker's journal service streams it
over HTTP (`broker.http`), the Spark data source reads it from a store file at hand
(`pipeline.source`), and both give Spark the same `JOURNAL_SCHEMA`. It lives here, between
the store and its readers, so that neither the broker nor the pipeline imports the other.

The store reads (`telemq.store.JournalReading`: the SQLite file's `JournalReader` or the
PostgreSQL database's twin): a chunk of rows comes back as one row of concatenated columns
(`PackedRange`), which pyarrow splits into Arrow arrays, so Python touches a handful of
objects per chunk, not per row. A chunk whose text columns do not split into its row count
(a U+0000 inside a value), whose payloads exceed Arrow's 2 GiB offsets, or a store that does
not plan the packed read in seq order, takes the row path instead.

MQTT 5.0 properties are stored as the bytes the broker forwards (`Message.properties`);
two columns are read from them, `content_type` and `user_properties` (a map: name -> first
value, as Spark refuses a map with a key twice), each NULL when absent. Only the rows that
have properties are decoded, each distinct value once per chunk (with the protocol's own
decoder, `protocol.properties.read_message_properties`); a chunk without any (every MQTT
3.1.1 message) gets two all-null arrays and decodes nothing.

`broker` is the journal's `origin`: the broker the publication was made at (this broker's
name for its own, another's for one that came over a link; docs/network.md §6), NULL for a
row written before store schema 6.

Each chunk is one short read transaction of a read-only connection (WAL): the broker never
waits for a reader, and the WAL checkpoints between chunks. Chunks start small and grow to
about `_TARGET_CHUNK_BYTES` of payload once the average row size is known, so a batch is a
bounded amount of memory whatever the payloads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from ..protocol import PropertyError, topic_matches
from ..protocol.properties import read_message_properties
from ..store import JournalReading, PackedRange

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "JOURNAL_COLUMNS",
    "JOURNAL_SCHEMA",
    "USER_PROPERTIES_TYPE",
    "TopicMatcher",
    "read_properties",
    "read_range",
]

JOURNAL_COLUMNS = (
    "seq",
    "ts",
    "topic",
    "sub_point",
    "qos",
    "retain",
    "payload",
    "client_id",
    "user_id",
    "content_type",
    "user_properties",
    "broker",
)

USER_PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
"""``map<string, string>``: MQTT 5.0 User Properties, name -> first value."""

JOURNAL_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("topic", pa.string()),
        ("sub_point", pa.string()),
        ("qos", pa.int32()),
        ("retain", pa.bool_()),
        ("payload", pa.binary()),
        ("client_id", pa.string()),
        ("user_id", pa.string()),
        ("content_type", pa.string()),
        ("user_properties", USER_PROPERTIES_TYPE),
        ("broker", pa.string()),
    ]
)
"""The journal rows as Arrow: exactly what Spark makes of the data source's DDL schema
(`pipeline.journal.JOURNAL_DDL`), which the batches must match."""

DEFAULT_CHUNK_ROWS = 50_000
_TARGET_CHUNK_BYTES = 32 << 20  # payload bytes per chunk once the average row size is known
_FIRST_CHUNK_ROWS = 1024  # before that: small, in case payloads are large
_MAX_BINARY = 2**31 - 1  # Arrow `binary` has 32-bit offsets

_TEXT_COLUMNS = ("topic", "sub_point", "client_id", "user_id", "broker")


class TopicMatcher:
    """Which rows of a batch match any of some MQTT topic filters, vectorized.

    Each distinct topic is matched once (with the broker's own `topic_matches`) and cached;
    a batch's mask is then one Arrow `is_in`.
    """

    def __init__(self, filters: Iterable[str]) -> None:
        self.filters = tuple(filters)
        self._seen: dict[str, bool] = {}

    def mask(self, topics: pa.Array) -> pa.Array:
        for topic in pc.unique(topics).to_pylist():
            if topic not in self._seen:
                self._seen[topic] = any(topic_matches(f, topic) for f in self.filters)
        matched = [t for t, ok in self._seen.items() if ok]
        return pc.is_in(topics, value_set=pa.array(matched, pa.string()))


Decoded = tuple[str | None, list[tuple[str, str]] | None]
_NO_PROPERTIES: Decoded = (None, None)


def read_properties(stored: bytes) -> Decoded:
    """`content_type` and `user_properties` (name, first value) of a row's stored properties
    (`Message.properties`: without a length), each None when absent. Bytes that do not
    decode (no broker writes them) count as none, rather than failing every reader."""
    try:
        props = read_message_properties(stored)
    except PropertyError:
        return _NO_PROPERTIES
    users = None
    if props.user_properties:
        first: dict[str, str] = {}
        for name, value in props.user_properties:
            first.setdefault(name, value)
        users = list(first.items())
    return props.content_type, users


def _property_columns(count: int, found: Iterable[tuple[int, bytes]]) -> list[pa.Array]:
    """The `content_type` and `user_properties` arrays of `count` rows, of which `found`
    (row index, stored properties) are the only ones with properties."""
    types: list[str | None] = [None] * count
    users: list[list[tuple[str, str]] | None] = [None] * count
    seen: dict[bytes, Decoded] = {}  # a device sends the same properties again and again
    for index, stored in found:
        decoded = seen.get(stored)
        if decoded is None:
            decoded = seen[stored] = read_properties(stored)
        types[index], users[index] = decoded
    return [pa.array(types, pa.string()), pa.array(users, USER_PROPERTIES_TYPE)]


def _no_property_columns(count: int) -> list[pa.Array]:
    return [pa.nulls(count, pa.string()), pa.nulls(count, USER_PROPERTIES_TYPE)]


def _packed_properties(packed: PackedRange, seq: pa.Array) -> list[pa.Array] | None:
    """The property columns of a packed range (`seq`: its rows' seqs); None if they do not
    split (a value that is not a blob: the row path reads it as none)."""
    if not packed.property_seqs:
        return _no_property_columns(packed.count)
    seqs = _decimal(packed.property_seqs, pa.int64())
    lengths = _decimal(packed.property_lengths, pa.int64()).to_pylist()
    blob = packed.properties
    if len(lengths) != len(seqs) or sum(lengths) != len(blob):
        return None
    if packed.high - packed.low + 1 == packed.count:
        positions = pc.subtract(seqs, packed.low)
    else:
        positions = pc.index_in(seqs, value_set=seq)
    found = []
    start = 0
    for index, length in zip(positions.to_pylist(), lengths, strict=True):
        found.append((index, blob[start : start + length]))
        start += length
    return _property_columns(packed.count, found)


def _null_if_empty(texts: pa.Array) -> pa.Array:
    """NULL for "" (a row written before the journal had origins: no broker is unnamed)."""
    return pc.if_else(pc.equal(texts, ""), pa.scalar(None, pa.string()), texts)


def _split(data: bytes, separator: bytes) -> pa.Array:
    return pc.split_pattern(pa.array([data], pa.binary()), pattern=separator).flatten()


def _decimal(data: bytes, kind: pa.DataType) -> pa.Array:
    return pc.cast(_split(data, b",").cast(pa.string()), kind)


def _chunk_fast(reader: JournalReading, a: int, b: int) -> pa.RecordBatch | None:
    """Rows ``a..b`` from one packed read; None if they must take the row path."""
    packed: PackedRange = reader.packed(a, b)
    count, low, high = packed.count, packed.low, packed.high
    if not count:
        return _empty_batch()
    texts = (packed.topic, packed.sub_point, packed.client_id, packed.user_id, packed.origin)
    flags, ts, lengths, payload = packed.flags, packed.ts_us, packed.lengths, packed.payload
    columns: dict[str, pa.Array] = {}
    for name, data in zip(_TEXT_COLUMNS, texts, strict=True):
        array = _split(data, b"\x00")
        if len(array) != count:
            return None  # a U+0000 inside a value: the row path sorts it out
        columns[name] = array.cast(pa.string())
    if len(flags) != count:
        return None
    if high - low + 1 == count:
        seq = pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count)), low - 1)
    else:
        seq = _decimal(reader.seqs(a, b), pa.int64())
    digits = pc.subtract(pa.Array.from_buffers(pa.uint8(), count, [None, pa.py_buffer(flags)]), 48)
    ends = pc.cumulative_sum(_decimal(lengths, pa.int64()))
    if ends[-1].as_py() > _MAX_BINARY:
        return None
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), ends.cast(pa.int32())])
    payloads = pa.Array.from_buffers(
        pa.binary(), count, [None, offsets.buffers()[1], pa.py_buffer(payload)]
    )
    properties = _packed_properties(packed, seq)
    if properties is None:
        return None
    return pa.RecordBatch.from_arrays(
        [
            seq,
            _decimal(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            columns["topic"],
            columns["sub_point"],
            pc.shift_right(digits, 1).cast(pa.int32()),
            pc.bit_wise_and(digits, 1).cast(pa.bool_()),
            payloads,
            columns["client_id"],
            columns["user_id"],
            *properties,
            _null_if_empty(columns["broker"]),
        ],
        schema=JOURNAL_SCHEMA,
    )


def _chunk_rows(reader: JournalReading, a: int, b: int) -> Iterator[pa.RecordBatch]:
    """Rows ``a..b`` one tuple at a time (slow, always right), in batches that fit Arrow."""
    rows = reader.rows(a, b)
    start = 0
    while start < len(rows):
        size = 0
        end = start
        while end < len(rows) and (end == start or size + len(rows[end][6]) <= _MAX_BINARY):
            size += len(rows[end][6])
            end += 1
        part = rows[start:end]
        cols = list(zip(*part, strict=True))
        found = [(i, p) for i, p in enumerate(cols[9]) if p and type(p) is bytes]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(cols[0], pa.int64()),
                pa.array(cols[1], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array(cols[2], pa.string()),
                pa.array(cols[3], pa.string()),
                pa.array(cols[4], pa.int32()),
                pa.array([bool(r) for r in cols[5]], pa.bool_()),
                pa.array(cols[6], pa.binary()),
                pa.array(cols[7], pa.string()),
                pa.array(cols[8], pa.string()),
                *(
                    _property_columns(len(part), found)
                    if found
                    else _no_property_columns(len(part))
                ),
                pa.array([origin or None for origin in cols[10]], pa.string()),
            ],
            schema=JOURNAL_SCHEMA,
        )
        start = end


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=JOURNAL_SCHEMA)


def read_range(
    reader: JournalReading,
    first: int,
    last: int,
    *,
    topics: TopicMatcher | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The journal rows with ``first <= seq <= last``, in seq order, as record batches.

    `topics` keeps the rows whose topic matches. Empty batches are not yielded.
    """
    fast = reader.packed_in_order
    rows = min(chunk_rows, _FIRST_CHUNK_ROWS)
    a = first
    while a <= last:
        b = min(last, a + rows - 1)
        chunk = _chunk_fast(reader, a, b) if fast else None
        batches = [chunk] if chunk is not None else list(_chunk_rows(reader, a, b))
        for batch in batches:
            if batch.num_rows and topics is not None:
                batch = batch.filter(topics.mask(batch.column("topic")))
            if batch.num_rows:
                yield batch
        if chunk is not None and chunk.num_rows:
            per_row = max(1, chunk.column("payload").nbytes // chunk.num_rows)
            rows = max(1, min(chunk_rows, _TARGET_CHUNK_BYTES // per_row))
        a = b + 1
