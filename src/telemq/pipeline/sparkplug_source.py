"""``format("telemq").option("sparkplug", ...)``: the data source reads Sparkplug B metrics.

With the option ``sparkplug`` = ``metrics``, the `telemq` data source returns the journal's
Sparkplug B publications as one row per metric (`sparkplug_schema.metrics_schema`); with
``quarantine``, the rows or metrics that cannot be read, with the reason
(`sparkplug_schema.quarantine_schema`). Both decode with `sparkplug_rows.decode_batch` (the
decoder of `sparkplug_metrics` and ``ingest --sparkplug``, fast path included) and keep their
half of its output, so the two views of the same range partition its Sparkplug rows: nothing
is dropped silently. Batch and streaming alike; every other option keeps its meaning (the
``topics`` and ``filter`` options choose journal rows before they are decoded).

Aliases. A DATA metric sent by alias is resolved through the BIRTH in force at its seq,
which may be far before the range read. The readers find them where the offsets are
planned, on the driver, by reading the journal's BIRTH topics (``spBv1.0/+/NBIRTH/+`` and
``spBv1.0/+/DBIRTH/+/+``, narrowed to the groups, edge nodes and devices the ``topics``
option reads: `birth_filters`) through the location seam, so over the journal service the
broker does the scan and sends only BIRTHs:

- a batch read gathers the BIRTHs from the journal's first seq to the range's end;
- a stream reader's long-lived offset process keeps the BIRTHs in force (`Births.latest`)
  as of the end of the last micro-batch it planned and reads only the BIRTHs of each new
  range. After a restart (a new process over the same checkpoint), or when Spark plans a
  range again, it rebuilds that state from the journal's first seq.

Each partition (`SparkplugRange`) carries `Births.window` of its seqs: the BIRTH in force
before its first seq and those inside it, per edge node and device. The state is the
journal itself, so a replayed micro-batch decodes as its first attempt did. A BIRTH that
journal retention deleted is gone from that state too: data after it by alias is then
quarantined (``no BIRTH of this edge node before it``), never guessed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from ..sparkplug.topic import NAMESPACE
from .source import JournalBatchReader, JournalStreamReader, SeqRange, SourceOptions
from .sparkplug_births import Births
from .sparkplug_rows import decode_batch
from .sparkplug_schema import METRIC_COLUMNS, metrics_schema, quarantine_schema

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "BIRTH_FILTERS",
    "VIEWS",
    "SparkplugBatchReader",
    "SparkplugRange",
    "SparkplugStreamReader",
    "birth_filters",
    "view_schema",
]

VIEWS = ("metrics", "quarantine")
BIRTH_FILTERS = (f"{NAMESPACE}/+/NBIRTH/+", f"{NAMESPACE}/+/DBIRTH/+/+")
_QUARANTINE_COLUMNS = ["seq", "ts", "topic", "payload", "metric_index", "reason"]
# Journal rows decoded at a time (about 20,000 metric rows of 10-metric messages): the
# decoder's lists stay small (a third faster than 50,000-row chunks), one Arrow batch each.
DECODE_ROWS = 2048


def view_schema(view: str) -> Any:
    """The Spark schema of a view (a `StructType`)."""
    return metrics_schema() if view == "metrics" else quarantine_schema()


def _intersect(a: list[str], b: list[str]) -> list[str] | None:
    """The levels of a filter matching what both filters match, or None when nothing does."""
    out: list[str] = []
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == "#":
            return out + b[index:]
        if y == "#":
            return out + a[index:]
        if x == "+" or x == y:
            out.append(y)
        elif y == "+":
            out.append(x)
        else:
            return None
    if len(a) == len(b):
        return out
    rest = a[len(b) :] if len(a) > len(b) else b[len(a) :]
    return out if rest == ["#"] else None  # "a/#" also matches "a"


def birth_filters(topics: Sequence[str]) -> tuple[str, ...]:
    """The topic filters of the BIRTHs that the rows of `topics` (all when empty) need.

    A filter's message type level is widened (NDATA rows need their NBIRTH) and a device
    filter also gives its edge node's level (a newer NBIRTH ends a DBIRTH), then each is
    intersected with `BIRTH_FILTERS`; so a user allowed to read only some groups reads only
    their BIRTHs (the journal service checks the ACL on every filter)."""
    if not topics:
        return BIRTH_FILTERS
    found: list[str] = []
    for topic_filter in topics:
        levels = topic_filter.split("/")
        if len(levels) > 2 and levels[2] != "#":
            levels[2] = "+"
        candidates = [levels]
        if len(levels) > 4 and "#" not in levels[:4]:
            candidates.append(levels[:4])
        for candidate in candidates:
            for births in BIRTH_FILTERS:
                both = _intersect(candidate, births.split("/"))
                if both is not None and "/".join(both) not in found:
                    found.append("/".join(both))
    return tuple(found)


def read_births(options: SourceOptions, births: Births, first: int, last: int) -> Births:
    """`births` plus the valid BIRTHs of the journal's seqs ``first..last`` (on the driver)."""
    filters = birth_filters(options.topics)
    if not filters or first > last:
        return births
    for batch in options.location.read(first, last, topics=filters, fail_on_data_loss=False):
        columns = (batch.column(n).to_pylist() for n in ("seq", "topic", "payload"))
        for seq, topic, data in zip(*columns, strict=True):
            births.add_message(seq, topic, data)
    return births


class SparkplugRange(SeqRange):
    """A `SeqRange` with the BIRTHs its rows' aliases resolve through."""

    def __init__(self, first: int, last: int, births: Births) -> None:
        super().__init__(first, last)
        self.births = births


def _with_births(ranges: list[SeqRange], births: Births) -> list[InputPartition]:
    return [SparkplugRange(r.first, r.last, births.window(r.first, r.last)) for r in ranges]


def read_view(
    options: SourceOptions, view: str, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    """The rows of `view` decoded from one partition's journal rows (on an executor)."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if not isinstance(partition, SparkplugRange):
        return
    names = METRIC_COLUMNS if view == "metrics" else _QUARANTINE_COLUMNS
    for chunk in options.read(partition):
        for start in range(0, chunk.num_rows, DECODE_ROWS):
            decoded = decode_batch(chunk.slice(start, DECODE_ROWS), partition.births)
            reasons = decoded.column("reason")
            if reasons.null_count == decoded.num_rows:  # no quarantine: the usual batch
                if view == "quarantine":
                    continue
                kept = decoded
            else:
                keep = pc.is_null(reasons) if view == "metrics" else pc.is_valid(reasons)
                kept = decoded.filter(keep)
            if kept.num_rows:
                yield pa.RecordBatch.from_arrays([kept.column(n) for n in names], names=names)


class SparkplugBatchReader(JournalBatchReader):
    """A batch read of a Sparkplug view: the journal's ranges, with their BIRTHs."""

    def __init__(self, options: SourceOptions, view: str) -> None:
        super().__init__(options)
        self.view = view

    def partitions(self) -> Sequence[InputPartition]:
        ranges = [p for p in super().partitions() if isinstance(p, SeqRange)]
        if not ranges:
            return []
        first, high = self.options.location.bounds()[0], ranges[-1].last
        births = read_births(self.options, Births(), first, high)
        return _with_births(ranges, births)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_view(self.options, self.view, partition)


class SparkplugStreamReader(JournalStreamReader):
    """A streaming read of a Sparkplug view; its offset process keeps the BIRTHs in force."""

    def __init__(self, options: SourceOptions, view: str) -> None:
        super().__init__(options)
        self.view = view
        self._births: Births | None = None  # the latest BIRTHs of seqs <= self._through
        self._through = 0

    def _births_before(self, low: int) -> Births:
        """The BIRTHs in force before seq `low`, from the state or rebuilt from the journal."""
        if self._births is None or self._through >= low:
            self._births, self._through = Births(), self._bounds()[0] - 1
        if self._through < low - 1:
            read_births(self.options, self._births, self._through + 1, low - 1)
            self._through = low - 1
        return self._births.latest()

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        ranges = [p for p in super().partitions(start, end) if isinstance(p, SeqRange)]
        if not ranges:
            return []
        low, high = ranges[0].first, ranges[-1].last
        births = read_births(self.options, self._births_before(low), low, high)
        self._births, self._through = births.latest(), high
        return _with_births(ranges, births)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_view(self.options, self.view, partition)
