"""The `telemq` data source: the journal as a Spark batch and streaming source (and the sink).

Spark's Python Data Source API (PySpark 4) splits the work in three places:

- *planning*, on the driver, in Python worker processes: `TelemqDataSource.reader` /
  `streamReader` build a reader; the batch reader's `partitions()` cuts the journal's seq range
  into `SeqRange`s. A separate, long-lived process runs the stream reader's offset methods
  (`initialOffset`, `latestOffset`, `partitions(start, end)`, `commit`, `stop`);
- *reading*, on executors: `read(partition)` fetches its own seq range and yields
  `pyarrow.RecordBatch`es, so any number of tasks read seq ranges in parallel. Where from is
  the `location` seam: the broker's journal service over HTTP (option ``journal``, the way
  for a cluster: executors never open a file of the broker's) or a store file at hand
  (option ``path``: the broker's host, or an offline copy).

Readers are created more than once (a fresh stream reader is built just to be pickled for the
executors), so constructors only parse options; side effects (the consumer record used by
journal retention: a record file, or an offset the journal service keeps) happen in the
offset methods, which only the long-lived process calls.

Offsets are ``{"seq": N}``: every row with ``seq <= N`` belongs to a batch at or before this
offset. A micro-batch from ``{"seq": a}`` to ``{"seq": b}`` reads exactly ``a < seq <= b``;
the journal is append-only with a gap-free seq, so a replayed range returns identical rows,
unless retention deleted them, which fails the query (``failOnDataLoss``, default true).

Options (case-insensitive): ``journal`` (the journal service, ``http[s]://host:port``, with
``user``, ``password``, ``cafile``, ``certfile``, ``keyfile``) or ``path`` (data directory or
store file), ``topics`` (MQTT topic
filters, comma-separated or a JSON list), ``filter`` (SQL filter), ``startingSeq``
(``earliest`` | ``latest`` | first seq), ``endingSeq`` (batch: last seq), ``maxRowsPerBatch``
(stream), ``rowsPerPartition``, ``minPartitions``, ``failOnDataLoss``, ``consumer`` (stream:
name of the consumer record), ``sparkplug`` (``metrics`` | ``quarantine``: Sparkplug B metric
rows, or what cannot be read with the reason, instead of journal rows; `sparkplug_source`,
docs/sparkplug.md). ``filter`` given straight to the format is evaluated by the
Python evaluator inside the reader, because a data source cannot add Spark expressions to the
plan; `read_journal` and `stream_journal` (which every job uses) compile it to a native
Column instead (`telemq.filters.spark.to_column`). Both give the same rows.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)

from ..filters import Filter, compile_filter
from ..store import consumers
from .journal import JOURNAL_DDL, parse_topics, split_range
from .location import CREDENTIAL_OPTIONS, DataLossError, JournalLocation, is_service_url, locate

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_ReadAllAvailable: Any = None
_ReadMaxRows: Any = None
_AvailableNow: Any = object
try:  # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming import datasource as _streaming

    _ReadAllAvailable = _streaming.ReadAllAvailable
    _ReadMaxRows = _streaming.ReadMaxRows
    _AvailableNow = _streaming.SupportsTriggerAvailableNow
except (ImportError, AttributeError):  # pragma: no cover - PySpark 4.0/4.1
    pass


__all__ = [
    "FORMAT",
    "JournalBatchReader",
    "JournalStreamReader",
    "SeqRange",
    "SourceOptions",
    "TelemqDataSource",
    "read_journal",
    "register",
    "stream_journal",
]

log = logging.getLogger("telemq.pipeline")

FORMAT = "telemq"
_ANONYMOUS = "query-"  # consumer records of queries without a consumer name
DEFAULT_ROWS_PER_PARTITION = 100_000


class SeqRange(InputPartition):
    """The journal rows ``first <= seq <= last``: one Spark task's share."""

    def __init__(self, first: int, last: int) -> None:
        self.first = first
        self.last = last


def _int_option(options: Mapping[str, str], name: str, default: int | None, low: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw))
    except ValueError:
        raise ValueError(f"telemq source: option {name}: not an integer: {raw!r}") from None
    if value < low:
        raise ValueError(f"telemq source: option {name}: must be at least {low}, got {value}")
    return value


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"telemq source: option {name}: expected true or false, got {raw!r}")
    return text == "true"


def sparkplug_view(options: Mapping[str, object]) -> str | None:
    """The option ``sparkplug``: ``metrics``, ``quarantine`` or None (journal rows)."""
    raw = {str(k).lower(): v for k, v in options.items()}.get("sparkplug")
    view = str(raw).strip().lower() if raw is not None else ""
    if view and view not in ("metrics", "quarantine"):
        raise ValueError(
            f"telemq source: option sparkplug: expected metrics or quarantine, got {raw!r}"
        )
    return view or None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options, parsed and checked once (errors name the option)."""

    location: JournalLocation
    topics: tuple[str, ...] = ()
    filter: str | None = None
    starting_seq: int | str = "earliest"  # "earliest", "latest" or the first seq to read
    ending_seq: int | None = None
    max_rows_per_batch: int | None = None
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    min_partitions: int = 1
    fail_on_data_loss: bool = True
    consumer: str | None = None
    sparkplug: str | None = None  # a Sparkplug view: "metrics" or "quarantine"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): v for k, v in options.items()}
        path, journal = opts.get("path"), opts.get("journal")
        if bool(path) == bool(journal):
            raise ValueError(
                "telemq source: give option journal (the broker's journal service,"
                " http://host:port) or option path (a data directory or store file), not both"
            )
        if journal and not is_service_url(str(journal)):
            raise ValueError(f"telemq source: option journal: not an http(s) URL: {journal!r}")
        topics = parse_topics(opts.get("topics"))
        try:
            location = locate(str(journal or path), opts, topics)
        except ValueError as error:
            raise ValueError(f"telemq source: option journal: {error}") from None
        if path and any(opts.get(k) for k in CREDENTIAL_OPTIONS):
            raise ValueError("telemq source: user, password and TLS files go with option journal")
        text = opts.get("filter")
        # compile_filter raises FilterError (reason 3150) with the position
        text = compile_filter(text).text if text is not None and text.strip() else None
        starting = str(opts.get("startingseq", "earliest")).strip().lower()
        start: int | str = starting
        if starting not in ("earliest", "latest"):
            start = _int_option(opts, "startingSeq", 1, 1) or 1
        sparkplug = sparkplug_view(opts)
        return cls(
            location=location,
            topics=topics,
            filter=text,
            starting_seq=start,
            ending_seq=_int_option(opts, "endingSeq", None, 0),
            max_rows_per_batch=_int_option(opts, "maxRowsPerBatch", None, 1),
            rows_per_partition=_int_option(opts, "rowsPerPartition", DEFAULT_ROWS_PER_PARTITION, 1)
            or DEFAULT_ROWS_PER_PARTITION,
            min_partitions=_int_option(opts, "minPartitions", 1, 1) or 1,
            fail_on_data_loss=_bool_option(opts, "failOnDataLoss", True),
            consumer=opts.get("consumer") or None,
            sparkplug=sparkplug,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition: what `read` does for both readers, on an executor."""
        if not isinstance(partition, SeqRange) or partition.first > partition.last:
            return
        yield from self.location.read(
            partition.first,
            partition.last,
            topics=self.topics,
            flt=compile_filter(self.filter) if self.filter else None,
            fail_on_data_loss=self.fail_on_data_loss,
        )


class JournalBatchReader(DataSourceReader):
    """Batch reads: the seq range fixed at planning time, split into `SeqRange`s."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Called once on the driver when the query is planned."""
        opts = self.options
        first, last = opts.location.bounds()
        if opts.starting_seq == "latest":
            raise ValueError("telemq source: startingSeq=latest is for streaming reads only")
        low = first if opts.starting_seq == "earliest" else int(opts.starting_seq)
        if low < first:
            if opts.fail_on_data_loss:
                raise DataLossError(low, first)
            low = first
        high = last if opts.ending_seq is None else min(last, opts.ending_seq)
        ranges = split_range(low, high, opts.rows_per_partition, opts.min_partitions)
        return [SeqRange(a, b) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Called on an executor, once per partition."""
        return self.options.read(partition)


class JournalStreamReader(DataSourceStreamReader, _AvailableNow):  # type: ignore[misc]
    """Streaming reads over ``{"seq": N}`` offsets (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: int | None = None  # Trigger.AvailableNow: never go past this seq
        self._last_end: int | None = None  # PySpark < 4.2 calls latestOffset() without start
        self._consumer: str | None = None  # this query's name, once its offset is saved
        self._saved_at = 0.0

    # -- driver side (the long-lived process of the query) ----------------------------------

    def _bounds(self) -> tuple[int, int]:
        return self.options.location.bounds()

    def _save(self, committed: int | None, running: bool = True) -> None:
        """Create or update this query's offset (for retention); never fails the query."""
        location = self.options.location
        if self._consumer is None:
            self._consumer = self.options.consumer or f"{_ANONYMOUS}{uuid.uuid4().hex[:12]}"
            location.sweep(_ANONYMOUS)  # offsets of anonymous queries that died
        location.save_offset(self._consumer, committed, running)
        self._saved_at = time.monotonic()

    def _heartbeat(self) -> None:
        if self._consumer is None or time.monotonic() - self._saved_at >= consumers.HEARTBEAT_S:
            self._save(None)

    def initialOffset(self) -> dict[str, int]:
        """Where a new query starts (a restarted one uses its checkpoint instead)."""
        first, last = self._bounds()
        start = self.options.starting_seq
        if start == "earliest":
            seq = first - 1
        elif start == "latest":
            seq = last
        else:
            seq = int(start) - 1
        self._heartbeat()
        return {"seq": seq}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        """The offset the next micro-batch reads up to, within `limit` (maxRowsPerBatch)."""
        _, last = self._bounds()
        if self._target is not None:
            last = min(last, self._target)
        self._heartbeat()
        origin = start["seq"] if start is not None else self._last_end
        if origin is not None:
            last = max(last, origin)  # never move backwards
            cap = self._row_cap(limit)
            if cap is not None:
                last = min(last, origin + cap)
        self._last_end = last
        return {"seq": last}

    def _row_cap(self, limit: Any) -> int | None:
        if _ReadMaxRows is not None and isinstance(limit, _ReadMaxRows):
            return int(limit.max_rows)
        if _ReadAllAvailable is not None and isinstance(limit, _ReadAllAvailable):
            return None
        return self.options.max_rows_per_batch  # PySpark < 4.2: no limit object

    def getDefaultReadLimit(self) -> Any:
        """maxRowsPerBatch as Spark's read limit (PySpark >= 4.2)."""
        if self.options.max_rows_per_batch is not None and _ReadMaxRows is not None:
            return _ReadMaxRows(self.options.max_rows_per_batch)
        return _ReadAllAvailable() if _ReadAllAvailable is not None else None

    def reportLatestOffset(self) -> dict[str, int]:
        return {"seq": self._bounds()[1]}

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what is in the journal now, in maxRowsPerBatch steps."""
        self._target = self._bounds()[1]

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """The micro-batch ``start < seq <= end``, in ranges of at most rowsPerPartition."""
        low, high = int(start["seq"]) + 1, int(end["seq"])
        if low > high:
            return []
        first, _ = self._bounds()
        if first > low:
            if self.options.fail_on_data_loss:
                raise DataLossError(low, first)
            low = first
        opts = self.options
        ranges = split_range(low, high, opts.rows_per_partition, opts.min_partitions)
        return [SeqRange(a, b) for a, b in ranges]

    def commit(self, end: dict[str, int]) -> None:
        """Spark has processed everything up to `end` (called one batch late)."""
        self._save(int(end["seq"]))

    def stop(self) -> None:
        """The query ended: a named consumer stays (stopped), an anonymous one goes.

        Best effort: Spark often kills this process instead (see `consumers`)."""
        if self._consumer is None:
            return
        if self.options.consumer:
            self._save(None, running=False)
        else:
            self.options.location.drop_offset(self._consumer)

    # -- executor side ---------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.options.read(partition)


class TelemqDataSource(DataSource):
    """``format("telemq")``: journal reader (batch, stream) and MQTT writer (batch, stream)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str | StructType:
        view = sparkplug_view(self.options)
        if view is None:
            return JOURNAL_DDL
        from .sparkplug_source import view_schema

        return view_schema(view)  # type: ignore[no-any-return]

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        if options.sparkplug is None:
            return JournalBatchReader(options)
        from .sparkplug_source import SparkplugBatchReader

        return SparkplugBatchReader(options, options.sparkplug)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = SourceOptions.parse(self.options)
        if options.sparkplug is None:
            return JournalStreamReader(options)
        from .sparkplug_source import SparkplugStreamReader

        return SparkplugStreamReader(options, options.sparkplug)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import MqttBatchWriter, SinkOptions

        return MqttBatchWriter(SinkOptions.parse(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import MqttStreamWriter, SinkOptions

        return MqttStreamWriter(SinkOptions.parse(self.options, schema))


def register(spark: SparkSession) -> None:
    """Make ``format("telemq")`` available in `spark` (idempotent)."""
    spark.dataSource.register(TelemqDataSource)


def _source_options(
    spark: SparkSession,
    where: str,
    topics: str | Sequence[str] | None,
    extra: Mapping[str, object] | None,
) -> dict[str, str]:
    # As many tasks as cores for a range big enough, unless the caller says otherwise.
    key = "journal" if is_service_url(str(where)) else "path"
    options = {key: str(where), "minPartitions": str(spark.sparkContext.defaultParallelism)}
    if isinstance(topics, str):
        options["topics"] = topics  # the option's own syntax: comma-separated or JSON
    elif topics:
        listed = list(topics)  # a JSON list when a filter holds a comma (legal in MQTT)
        commas = any("," in t for t in listed)
        options["topics"] = json.dumps(listed) if commas else ",".join(listed)
    for key, value in (extra or {}).items():
        if value is not None:
            options[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return options


def _filter_where(
    options: dict[str, str], flt: Filter | str | None
) -> tuple[dict[str, str], Filter | str | None]:
    """A Sparkplug view has no payload column: its filter goes to the reader (option
    ``filter``), which applies it to the journal rows before they are decoded."""
    if flt is None or sparkplug_view(options) is None:
        return options, flt
    return {**options, "filter": flt.text if isinstance(flt, Filter) else flt}, None


def _apply_filter(frame: DataFrame, flt: Filter | str | None) -> DataFrame:
    if flt is None or (isinstance(flt, str) and not flt.strip()):
        return frame
    from ..filters.spark import to_column

    return frame.filter(to_column(compile_filter(flt) if isinstance(flt, str) else flt))


def read_journal(
    spark: SparkSession,
    where: str,
    *,
    topics: str | Sequence[str] | None = None,
    filter: Filter | str | None = None,
    options: Mapping[str, object] | None = None,
) -> DataFrame:
    """The journal as a batch DataFrame, with `filter` compiled to a native Spark Column.

    `where`: the journal service's URL (``http[s]://host:port``) or a data directory or
    store file. `options` are further source options (``startingSeq``, ``endingSeq``,
    ``user``, ``password``, ...).
    """
    register(spark)
    opts, filter = _filter_where(_source_options(spark, where, topics, options), filter)
    return _apply_filter(spark.read.format(FORMAT).options(**opts).load(), filter)


def stream_journal(
    spark: SparkSession,
    where: str,
    *,
    topics: str | Sequence[str] | None = None,
    filter: Filter | str | None = None,
    options: Mapping[str, object] | None = None,
) -> DataFrame:
    """The journal as a streaming DataFrame, with `filter` as a native Spark Column."""
    register(spark)
    opts, filter = _filter_where(_source_options(spark, where, topics, options), filter)
    return _apply_filter(spark.readStream.format(FORMAT).options(**opts).load(), filter)
