"""The journal for the pipeline: where it is, its Spark schema, ranges and filters.

Pure Python with pyarrow; no pyspark, so it runs (and is tested) without a JVM. The rows come
as Arrow batches from `telemq.journal` (its encoding of store ranges, shared with the broker's
journal service); this module adds what only the pipeline needs: Spark's DDL for them, the
cutting of seq ranges into tasks, the ``topics`` option, and the Python evaluator of SQL
filters over a batch (the data source's ``filter`` option).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]

from ..filters import Filter
from ..journal.arrow import DEFAULT_CHUNK_ROWS, TopicMatcher, read_range
from ..protocol import topic_filter_error
from ..store import DB_FILENAME, JournalReader

__all__ = [
    "JOURNAL_DDL",
    "MIN_SPLIT_ROWS",
    "data_dir_of",
    "filter_mask",
    "parse_topics",
    "read_bounds",
    "read_filtered",
    "split_range",
]

JOURNAL_DDL = (
    "seq bigint, ts timestamp, topic string, sub_point string, qos int, retain boolean,"
    " payload binary, client_id string, user_id string, content_type string,"
    " user_properties map<string, string>, broker string"
)
"""The Spark schema of journal rows (design section 8); `journal.arrow.JOURNAL_SCHEMA` is
the same as Arrow. `content_type` and `user_properties` (name -> first value) come from the
MQTT 5.0 properties, NULL when absent (always for MQTT 3.1.1). `broker` is the broker the
publication was made at (docs/network.md §6), NULL in rows older than store schema 6."""

_COLUMNS_OF_PROPERTIES = (
    ("Topic", "topic"),
    ("QoS", "qos"),
    ("Retain", "retain"),
    ("ClientId", "client_id"),
    ("UserId", "user_id"),
    ("SubPoint", "sub_point"),
    ("ContentType", "content_type"),
    ("Broker", "broker"),
)
_USER = "User."  # ``Properties.User.<name>`` is the property ``User.<name>`` of a filter

# Below this, one more task costs more than it saves: a task of the Python source is tens of
# milliseconds of fixed work (more on a busy machine), while 10,000 journal rows read in
# about as long; a small micro-batch of a continuous ingest is then one task.
MIN_SPLIT_ROWS = 10_000


def data_dir_of(path: str | os.PathLike[str]) -> Path:
    """The data directory of `path` (a data directory or its store file)."""
    p = Path(path)
    return p.parent if p.name == DB_FILENAME or p.is_file() else p


def read_bounds(path: str | os.PathLike[str]) -> tuple[int, int]:
    """`JournalReader.bounds` of the store at `path`, on a reader opened for it; raises
    `telemq.store.StoreError` when `path` holds no store."""
    with JournalReader(path) as reader:
        return reader.bounds()


def split_range(
    first: int, last: int, rows_per_partition: int, min_partitions: int = 1
) -> list[tuple[int, int]]:
    """Cut the inclusive seq range ``first..last`` into consecutive ranges of at most
    `rows_per_partition` seqs, and into at least `min_partitions` ranges when that leaves
    each one `MIN_SPLIT_ROWS` seqs or more (none when the range is empty)."""
    total = last - first + 1
    step = max(1, rows_per_partition)
    if min_partitions > 1 and total > 0:
        even = -(-total // min_partitions)  # ceiling division
        step = min(step, max(even, MIN_SPLIT_ROWS))
    return [(a, min(a + step - 1, last)) for a in range(first, last + 1, step)]


def parse_topics(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """MQTT topic filters from an option: a JSON list, or a comma-separated string."""
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        items = json.loads(text) if text.startswith("[") else text.split(",")
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"topics: expected a list of topic filters, got {value!r}")
    else:
        items = list(value)
    filters = tuple(i.strip() if isinstance(value, str) else i for i in items)
    for topic_filter in filters:
        error = topic_filter_error(topic_filter)
        if error is not None:
            raise ValueError(f"topics: {error}")
    return filters


def filter_mask(batch: pa.RecordBatch, flt: Filter) -> pa.Array:
    """The Python evaluator over a batch (the Spark path compiles filters to Columns)."""
    payloads = batch.column("payload").to_pylist()
    if not flt.properties:
        return pa.array([flt.matches(p) for p in payloads], pa.bool_())
    columns = {
        name: batch.column(column).to_pylist()
        for name, column in _COLUMNS_OF_PROPERTIES
        if name in flt.properties
    }
    users = [name for name in flt.properties if name.startswith(_USER)]
    if users:
        maps = [dict(m) if m else {} for m in batch.column("user_properties").to_pylist()]
        for name in users:
            columns[name] = [m.get(name[len(_USER) :]) for m in maps]
    names = list(columns)
    values = list(zip(*columns.values(), strict=True))
    flags = [
        flt.matches(p, dict(zip(names, v, strict=True)))
        for p, v in zip(payloads, values, strict=True)
    ]
    return pa.array(flags, pa.bool_())


def read_filtered(
    reader: JournalReader,
    first: int,
    last: int,
    *,
    topics: TopicMatcher | None = None,
    flt: Filter | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Iterator[pa.RecordBatch]:
    """`journal.arrow.read_range`, keeping only the rows `flt` is TRUE for (Python
    evaluator). Empty batches are not yielded."""
    for batch in read_range(reader, first, last, topics=topics, chunk_rows=chunk_rows):
        if flt is not None:
            batch = batch.filter(filter_mask(batch, flt))
        if batch.num_rows:
            yield batch
