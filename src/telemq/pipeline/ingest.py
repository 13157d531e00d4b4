"""`telemq pipeline ingest`: the journal into a Parquet lake, each seq exactly once.

The lake is a directory of tables, on any storage Spark can reach: a local path, or a Hadoop
file system URI (``file:``, ``hdfs://``, ``s3a://`` with its connector). Ingest writes
``<lake>/journal``, partitioned by the UTC date of ``ts``::

    <lake>/journal/date=2024-11-22/batch-000000000042-0000.parquet
    <lake>/_checkpoints/ingest/spark/      Spark's checkpoint (default location)
    <lake>/_staging/ingest-<id>/           a batch while it is written (hidden from readers)

How exactly-once works. A streaming query reads the `telemq` source (offsets ``{"seq": N}``
in the checkpoint) and hands each micro-batch to `BatchCommitter` (``foreachBatch``). Spark
may run a batch again after a crash, with the same batch id and, from this source, the same
rows. The committer makes that harmless:

1. Spark's executors write the batch's Parquet files into ``_staging/<query>/<batch id>``
   (emptied first), on the table's file system, so that step 3 is a rename;
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
the table alone never holds a row twice, and the next run completes the batch; a reader that
needs more than that should read after the job has returned. Either way, once a run has
returned, the table holds each seq exactly once. The table never holds Spark's
``_spark_metadata`` and needs none: any Parquet reader (Spark, pyarrow, pandas, DuckDB) reads
it.

On a cluster, the lake and the checkpoint must be storage every node reaches at the same URI
(HDFS, an object store, or one network file system mounted at the same path everywhere):
executors write the staged files, the driver renames them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .lakefs import LakeFileSystem, join, lake_uri
from .location import locate
from .source import stream_journal
from .table_format import BatchStats, LakeStats

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "BatchCommitter",
    "IngestResult",
    "check_ingest",
    "default_checkpoint",
    "journal_table",
    "lake_stats",
    "run_ingest",
    "utc_date",
]

Progress = Callable[[str], None]


def journal_table(lake: str | os.PathLike[str]) -> Path:
    """The journal table of a local lake (what ingest writes and aggregate reads)."""
    return Path(lake) / "journal"


def table_uri(lake: str | os.PathLike[str]) -> str:
    """The journal table of a lake given as a path or a URI, as a URI."""
    return join(lake_uri(lake), "journal")


def default_checkpoint(lake: str | os.PathLike[str]) -> str:
    return join(lake_uri(lake), "_checkpoints", "ingest")


def utc_date(ts: str = "ts") -> Column:
    """The UTC calendar date of a timestamp column, whatever the session time zone."""
    from pyspark.sql import functions as F

    return F.date_from_unix_date(F.floor(F.unix_micros(F.col(ts)) / 86_400_000_000).cast("int"))


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
        (
            frame.withColumn("date", utc_date())
            .sortWithinPartitions("date", "seq")
            .write.partitionBy("date")
            .parquet(stage)
        )
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
            rate = rows / stats.seconds if stats.seconds > 0 else 0.0
            self.progress(
                f"batch {batch_id}: {rows:,} rows (seq {first:,}..{last:,}) in {stats.files}"
                f" file(s), {rate:,.0f} rows/s"
            )


def lake_stats(fs: LakeFileSystem, lake: str | os.PathLike[str]) -> LakeStats:
    """Rows, files, dates and seq range of the journal table, from Parquet footers."""
    stats = LakeStats()
    dates = set()
    for info in fs.glob(join(table_uri(lake), "date=*", "*.parquet")):
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


@dataclass(slots=True)
class IngestResult:
    lake: str  # URIs
    checkpoint: str
    batches: list[BatchStats]
    seconds: float
    lake_stats: LakeStats

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)


def committed_offset(fs: LakeFileSystem, spark_checkpoint: str) -> int | None:
    """The source offset (seq) of the last batch Spark recorded as done in a checkpoint."""
    done = [i.name for i in fs.glob(join(spark_checkpoint, "commits", "*")) if i.name.isdigit()]
    if not done:
        return None
    try:
        text = fs.read_text(join(spark_checkpoint, "offsets", str(max(map(int, done)))))
        return int(json.loads(text.splitlines()[-1])["seq"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def consumer_name(checkpoint: str | os.PathLike[str]) -> str:
    """The consumer name of an ingest query: stable per checkpoint (a local one by its
    resolved path, as before lakes could be URIs)."""
    uri = lake_uri(checkpoint)
    key = str(Path(uri.removeprefix("file:")).resolve()) if uri.startswith("file:") else uri
    digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]
    return f"ingest-{digest}"


def check_ingest(
    where: str | os.PathLike[str],
    lake: str | os.PathLike[str],
    *,
    trigger_seconds: float = 2.0,
    max_rows_per_batch: int | None = None,
    duration: float | None = None,
    journal_options: Mapping[str, str] | None = None,
) -> None:
    """Refuse what would fail inside Spark, before a session is started and the lake touched:
    a data directory without a broker's store, a journal service that cannot be reached or
    refuses the credentials, a lake that is a file, numbers out of range."""
    if not trigger_seconds > 0:
        raise ValueError(f"trigger: expected seconds > 0, got {trigger_seconds:g}")
    if max_rows_per_batch is not None and max_rows_per_batch < 1:
        raise ValueError(f"max rows per batch: expected 1 or more, got {max_rows_per_batch}")
    if duration is not None and not duration >= 0:
        raise ValueError(f"duration: expected seconds >= 0, got {duration:g}")
    local = lake_uri(lake).removeprefix("file:") if lake_uri(lake).startswith("file:") else None
    if local is not None and Path(local).exists() and not Path(local).is_dir():
        raise ValueError(f"lake {lake}: not a directory")
    locate(str(where), journal_options).bounds()


def _failure(error: BaseException) -> str:
    """The cause of a failed query in one line: the Python error a source task raised, if
    Spark's message carries one (it wraps it in a traceback and the query's state)."""
    lines = [line.strip() for line in str(error).splitlines()]
    causes = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line)]
    return causes[-1] if causes else lines[0] if lines else type(error).__name__


def run_ingest(
    spark: SparkSession,
    where: str | os.PathLike[str],
    lake: str | os.PathLike[str],
    *,
    journal_options: Mapping[str, str] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    continuous: bool = False,
    trigger_seconds: float = 2.0,
    max_rows_per_batch: int | None = None,
    duration: float | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Ingest the journal `where` is (a data directory, a store file, or the journal service's
    URL with `journal_options` for its client) into `lake` (see the module docstring).

    Once (default): everything in the journal now, in batches of at most
    `max_rows_per_batch` rows, then return. Continuous: a micro-batch every
    `trigger_seconds` until `stop` is set or `duration` seconds pass; what the journal holds
    at that moment is processed before returning.
    """
    from pyspark.errors import StreamingQueryException

    check_ingest(
        where,
        lake,
        trigger_seconds=trigger_seconds,
        max_rows_per_batch=max_rows_per_batch,
        duration=duration,
        journal_options=journal_options,
    )
    started = time.monotonic()
    location = locate(str(where), journal_options)
    lake_u = lake_uri(lake)
    ckpt = lake_uri(checkpoint) if checkpoint is not None else default_checkpoint(lake_u)
    fs = LakeFileSystem.for_uri(spark, lake_u)
    table = table_uri(lake_u)
    fs.mkdirs(table)
    # Staged beside the table, on its file system: a rename never crosses file systems.
    staging = join(lake_u, "_staging", consumer_name(ckpt))
    committer = BatchCommitter(fs, table, staging, progress)
    options: dict[str, object] = {**(journal_options or {}), "consumer": consumer_name(ckpt)}
    if max_rows_per_batch is not None:
        options["maxRowsPerBatch"] = max_rows_per_batch
    frame = stream_journal(spark, str(where), options=options)
    writer = frame.writeStream.foreachBatch(committer).option(
        "checkpointLocation", join(ckpt, "spark")
    )
    if continuous:
        writer = writer.trigger(processingTime=f"{trigger_seconds:g} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.queryName(f"telemq-ingest-{consumer_name(ckpt)}").start()
    try:
        if continuous:
            deadline = None if duration is None else time.monotonic() + duration
            while query.isActive and not (stop is not None and stop.is_set()):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                query.awaitTermination(1)
            if query.isActive:
                query.processAllAvailable()
        else:
            query.awaitTermination()
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"ingest failed: {_failure(error)}")
    except StreamingQueryException as exc:
        raise RuntimeError(f"ingest failed: {_failure(exc)}") from exc
    finally:
        with contextlib.suppress(Exception):
            query.stop()
        done = committed_offset(LakeFileSystem.for_uri(spark, ckpt), join(ckpt, "spark"))
        location.save_offset(consumer_name(ckpt), done, False)
    return IngestResult(
        lake_u, ckpt, committer.batches, time.monotonic() - started, lake_stats(fs, lake_u)
    )
