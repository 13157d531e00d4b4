"""The ``parquet`` table format: the journal table as a directory of plain Parquet files.

The lake is a directory of tables, on any storage Spark can reach: a local path, or a Hadoop
file system URI (``file:``, ``hdfs://``, ``s3a://`` with its connector). The journal table is
``<lake>/journal``, partitioned by the UTC date of ``ts``::

    <lake>/journal/date=2024-11-22/batch-000000000042-0000.parquet
    <lake>/_staging/ingest-<id>/           a batch while it is written (hidden from readers)

How exactly-once works without a table log. Spark may run a micro-batch again after a crash,
with the same batch id and, from the `telemq` source, the same rows. `BatchCommitter` makes
that harmless:

1. Spark's executors (or the driver, for a small batch: below) write the batch's Parquet files
   into ``_staging/<query>/<batch id>`` (emptied first), on the table's file system, so that
   step 3 is a rename;
2. files a previous attempt of the same batch left in the table are deleted (their names
   start with the batch id);
3. each staged file is renamed into its date directory as ``batch-<id>-<k>.parquet``.

Spark records the batch as done only after that, so every seq is in the table once, whatever
moment the job is killed at. The file operations go through Hadoop's FileSystem on the driver
(`lakefs.LakeFileSystem`), the same API and settings Spark writes with, never Python's ``os``.

What a reader sees depends on the storage's rename. Where it is atomic (local disks, HDFS), a
reader sees a whole file or none, and mid-crash at most a batch partly moved in (a subset of
its rows, none twice), completed by the next run. Where it is a copy and a delete (s3a), each
object still appears whole, but for a moment a file may be both staged and in the table:
the table alone never holds a row twice, and the next run completes the batch. The table
never holds Spark's ``_spark_metadata`` and needs none: any Parquet reader reads it.

Small batches on a local lake (`write_batch`). Spark's file writer costs a micro-batch a fixed
half second or more on a busy 2-core machine (its commit protocol's directories and renames,
the writer's set-up), which is most of a small batch's time and so of a continuous ingest's
freshness. A batch of at most `DRIVER_WRITE_MAX_ROWS` rows, on a ``local`` master with the lake
a ``file:`` URI, is therefore fetched to the driver as Arrow (one Spark job, the same rows) and
written there by pyarrow, in the same layout (a ``date=`` directory per UTC date, sorted by
seq, the session's timestamp type and codec), into the same staging directory: the steps
after it, and so exactly-once, are the same for every format. Larger batches, and every
batch on a cluster or another file system, are written by Spark's executors.

`ParquetTable` is this format behind the `table_format.LakeTable` seam. It cannot compact:
without a log, rewriting files in place would show a reader rows twice or not at all.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .lakefs import LakeFileSystem, join, lake_uri
from .table_format import BatchStats, LakeError, LakeStats

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "BatchCommitter",
    "ParquetTable",
    "found_format",
    "found_local_format",
    "journal_table",
    "lake_stats",
    "micros_timestamps",
    "table_uri",
    "utc_date",
    "write_batch",
]

Progress = Callable[[str], None]
DRIVER_WRITE_MAX_ROWS = 50_000  # a batch this small, on a local lake, is written by the driver
TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
PAYLOAD_SCHEMA_FILE = "_payload_schema"  # the table's payload schema (DDL), beside its files
COMPACT_REFUSED = (
    "compact needs a table format with a log (--format delta or iceberg): rewriting"
    " a plain Parquet table in place would show readers rows twice or not at all"
)


def journal_table(lake: str | os.PathLike[str]) -> Path:
    """The journal table of a local lake (what ingest writes and aggregate reads)."""
    return Path(lake) / "journal"


def table_uri(lake: str | os.PathLike[str]) -> str:
    """The journal table of a lake given as a path or a URI, as a URI."""
    return join(lake_uri(lake), "journal")


def utc_date(ts: str = "ts") -> Column:
    """The UTC calendar date of a timestamp column, whatever the session time zone."""
    from pyspark.sql import functions as F

    return F.date_from_unix_date(F.floor(F.unix_micros(F.col(ts)) / 86_400_000_000).cast("int"))


def write_batch(dated: DataFrame, where: str, *, micros: bool = False) -> None:
    """Write a batch with its ``date`` column as Parquet files under `where`: one
    ``date=<day>`` directory per UTC date, sorted by seq; by the driver when the batch is
    small and both the lake and Spark's master are local (see the module docstring), else by
    Spark's executors. `micros`: timestamps as INT64 microseconds (Delta's and Iceberg's
    unit) instead of the session's type (Spark's default, INT96, is a legacy type)."""
    if _write_on_driver(dated, where, "TIMESTAMP_MICROS" if micros else None):
        return
    setting = micros_timestamps(dated.sparkSession) if micros else contextlib.nullcontext()
    with setting:
        dated.sortWithinPartitions("date", "seq").write.partitionBy("date").parquet(where)


_writers_lock = threading.Lock()
_writers: dict[int, tuple[int, str | None]] = {}  # per session: writes under way, the old value


@contextlib.contextmanager
def micros_timestamps(spark: SparkSession) -> Iterator[None]:
    """Spark writes timestamps as INT96 unless told otherwise, Delta and Iceberg want
    microseconds: set for the writes under way on a session, the session's own value back
    after the last."""
    key = id(spark)
    with _writers_lock:
        count, before = _writers.get(key, (0, None))
        if count == 0:
            before = spark.conf.get(TIMESTAMP_TYPE, None)
            spark.conf.set(TIMESTAMP_TYPE, "TIMESTAMP_MICROS")
        _writers[key] = (count + 1, before)
    try:
        yield
    finally:
        with _writers_lock:
            count, before = _writers.pop(key)
            if count > 1:
                _writers[key] = (count - 1, before)
            elif before is None:
                spark.conf.unset(TIMESTAMP_TYPE)
            else:
                spark.conf.set(TIMESTAMP_TYPE, before)


def _write_on_driver(dated: DataFrame, where: str, timestamps: str | None) -> bool:
    """`write_batch` by the driver, if the batch is small, `where` local and Spark's master
    too. `timestamps` is Spark's ``outputTimestampType`` to write (None: the session's).
    False: nothing written, Spark's executors must."""
    local = str(dated.sparkSession.sparkContext.master).startswith("local")
    if not (local and where.startswith("file:")):
        return False
    batch = dated.limit(DRIVER_WRITE_MAX_ROWS + 1).toArrow()
    if batch.num_rows > DRIVER_WRITE_MAX_ROWS:
        return False
    conf = dated.sparkSession.conf
    kind = timestamps or conf.get(TIMESTAMP_TYPE, None) or "INT96"
    codec = conf.get("spark.sql.parquet.compression.codec", None) or "snappy"
    _write_arrow(batch, where, kind, codec)
    return True


def _write_arrow(batch: Any, where: str, timestamps: str, codec: str) -> None:
    """`_write_on_driver`'s writing: the layout and types Spark's writer gives. Every column
    nullable, as Spark writes them; INT96 or INT64 timestamps as Spark's setting says; no
    Arrow schema in the footer, so readers see the Parquet types alone, as with Spark's."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    if not batch.num_rows:
        return
    batch = batch.cast(pa.schema([field.with_nullable(True) for field in batch.schema]))
    directory = "/" + where.removeprefix("file:").lstrip("/")
    int96 = timestamps.upper() == "INT96"
    unit = "ms" if timestamps.upper() == "TIMESTAMP_MILLIS" else "us"
    compression = "none" if codec.lower() in ("none", "uncompressed") else codec.lower()
    name = f"part-00000-{uuid.uuid4()}.{compression}.parquet"
    for day in pc.unique(batch.column("date")).to_pylist():
        rows = batch.filter(pc.equal(batch.column("date"), day))
        rows = rows.drop_columns(["date"]).sort_by("seq")
        os.makedirs(f"{directory}/date={day.isoformat()}", exist_ok=True)
        pq.write_table(
            rows,
            f"{directory}/date={day.isoformat()}/{name}",
            compression=compression,
            use_deprecated_int96_timestamps=int96,
            coerce_timestamps=None if int96 else unit,
            allow_truncated_timestamps=True,
            store_schema=False,
        )


def found_format(fs: LakeFileSystem, table: str) -> str | None:
    """The format of the table at `table` by what is there: ``delta`` (a ``_delta_log``),
    ``iceberg`` (``metadata/*.metadata.json``), ``parquet`` (``date=*/*.parquet`` and no
    log), or None when there is no table yet."""
    if fs.is_dir(join(table, "_delta_log")):
        return "delta"
    if fs.glob(join(table, "metadata", "*.metadata.json")):
        return "iceberg"
    if fs.glob(join(table, "date=*", "*.parquet")):
        return "parquet"
    return None


def found_local_format(lake: str | os.PathLike[str]) -> str | None:
    """`found_format` for a lake on the local disk, without Spark (None for other URIs)."""
    uri = lake_uri(lake)
    if not uri.startswith("file:"):
        return None
    table = journal_table("/" + uri.removeprefix("file:").lstrip("/"))
    if (table / "_delta_log").is_dir():
        return "delta"
    if any((table / "metadata").glob("*.metadata.json")):
        return "iceberg"
    if any(table.glob("date=*/*.parquet")):
        return "parquet"
    return None


def refuse_other_format(fs: LakeFileSystem, table: str, wanted: str) -> None:
    """`LakeError` when the table at `table` is of another format than `wanted`."""
    found = found_format(fs, table)
    if found is not None and found != wanted:
        raise LakeError(
            f"{table} is a {found} table, not {wanted}: give --format {found}, or another --lake"
        )


class BatchCommitter:
    """The ``foreachBatch`` function of ingest: stage, clear earlier attempts, rename in."""

    def __init__(
        self, fs: LakeFileSystem, table: str, staging: str, progress: Progress | None = None
    ) -> None:
        self.fs = fs
        self.table = table
        self.staging = staging
        self.progress = progress
        self.batches: list[BatchStats] = []

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        fs = self.fs
        stage = join(self.staging, str(batch_id))
        fs.delete(stage, recursive=True)
        write_batch(frame.withColumn("date", utc_date()), stage)
        prefix = f"batch-{batch_id:012d}-"
        for old in fs.glob(join(self.table, "date=*", f"{prefix}*.parquet")):
            fs.delete(old.uri)  # a previous attempt of this batch: replaced below
        rows, first, last = 0, None, None
        staged = fs.glob(join(stage, "date=*", "*.parquet"))
        for k, info in enumerate(staged):
            count, low, high = fs.parquet_stats(info.uri)
            rows += count
            first = low if first is None or (low is not None and low < first) else first
            last = high if last is None or (high is not None and high > last) else last
            fs.move(info.uri, join(self.table, info.parent, f"{prefix}{k:04d}.parquet"))
        fs.delete(stage, recursive=True)
        stats = BatchStats(batch_id, rows, len(staged), first, last, time.monotonic() - started)
        self.batches.append(stats)
        if self.progress is not None and rows:
            self.progress(batch_line(stats))


def batch_line(stats: BatchStats) -> str:
    """The progress line of one committed batch."""
    rate = stats.rows / stats.seconds if stats.seconds > 0 else 0.0
    seqs = "" if stats.first_seq is None else f" (seq {stats.first_seq:,}..{stats.last_seq:,})"
    return (
        f"batch {stats.batch_id}: {stats.rows:,} rows{seqs} in {stats.files} file(s),"
        f" {rate:,.0f} rows/s"
    )


def lake_stats(
    fs: LakeFileSystem, lake: str | os.PathLike[str], table: str | None = None
) -> LakeStats:
    """Rows, files, dates and seq range of the journal table (or `table`), from Parquet
    footers."""
    stats = LakeStats()
    dates = set()
    for info in fs.glob(join(table or table_uri(lake), "date=*", "*.parquet")):
        count, low, high = fs.parquet_stats(info.uri)
        stats.rows += count
        stats.files += 1
        dates.add(info.parent.removeprefix("date="))
        if low is not None:
            stats.first_seq = low if stats.first_seq is None else min(stats.first_seq, low)
        if high is not None:
            stats.last_seq = high if stats.last_seq is None else max(stats.last_seq, high)
    stats.dates = sorted(dates)
    return stats


class ParquetTable:
    """The journal table of `lake` as plain Parquet files (see the module docstring)."""

    format_name = "parquet"

    def __init__(
        self,
        spark: SparkSession,
        lake: str | os.PathLike[str],
        *,
        query_id: str | None = None,
        progress: Progress | None = None,
        name: str | None = None,
    ) -> None:
        """`name`: a table beside the journal (``quarantine``) instead of the journal."""
        self.spark = spark
        self.lake = lake_uri(lake)
        self.table = table_uri(self.lake) if name is None else join(self.lake, name)
        self.fs = LakeFileSystem.for_uri(spark, self.lake)
        # Staged beside the table, on its file system: a rename never crosses file systems.
        staging = join(self.lake, "_staging", query_id or "parquet")
        self.committer = BatchCommitter(self.fs, self.table, staging)

    def check(self) -> None:
        refuse_other_format(self.fs, self.table, self.format_name)

    def commit_batch(self, frame: DataFrame, batch_id: int) -> BatchStats:
        self.committer(frame, batch_id)
        return self.committer.batches[-1]

    def read(self) -> DataFrame:
        if not self.fs.glob(join(self.table, "date=*", "*.parquet")):
            raise LakeError(f"no journal table in {self.lake}: run telemq pipeline ingest first")
        # Files written before --merge-schema added a typed column lack it: NULL there.
        merge = self.payload_schema() is not None
        return self.spark.read.option("mergeSchema", str(merge).lower()).parquet(self.table)

    def stats(self) -> LakeStats:
        if self.table != table_uri(self.lake):
            return lake_stats(self.fs, self.table.rpartition("/")[0], self.table)
        return lake_stats(self.fs, self.lake)

    def payload_schema(self) -> str | None:
        """The DDL in ``<table>/_payload_schema`` (hidden from Parquet readers by its ``_``)."""
        path = join(self.table, PAYLOAD_SCHEMA_FILE)
        return self.fs.read_text(path).strip() if self.fs.exists(path) else None

    def record_payload_schema(self, ddl: str, columns: DataFrame) -> None:
        """Written before the batch's files: Parquet files carry their own schema, so new
        columns need nothing more than readers merging schemas (`read`)."""
        if self.payload_schema() != ddl:
            self.fs.write_text(join(self.table, PAYLOAD_SCHEMA_FILE), ddl)

    def compact(self, keep_hours: float) -> str:
        raise LakeError(COMPACT_REFUSED)
