"""`telemq pipeline ingest`: the journal into a Parquet lake, each seq exactly once.

The lake is a directory of tables; ingest writes ``<lake>/journal``, partitioned by the UTC
date of ``ts``::

    <lake>/journal/date=2024-11-22/batch-000000000042-0000.parquet
    <lake>/_checkpoints/ingest/            Spark's checkpoint (default location)
    <lake>/_checkpoints/ingest/staging/    a batch while it is written

How exactly-once works. A streaming query reads the `telemq` source (offsets ``{"seq": N}``
in the checkpoint) and hands each micro-batch to `BatchCommitter` (``foreachBatch``). Spark
may run a batch again after a crash, with the same batch id and, from this source, the same
rows. The committer makes that harmless:

1. Spark writes the batch's Parquet files into ``staging/<batch id>`` (emptied first);
2. files a previous attempt of the same batch left in the table are deleted (their names
   start with the batch id);
3. each staged file is renamed into its date directory as ``batch-<id>-<k>.parquet``:
   a rename within one file system, so a reader sees a whole file or none.

Spark records the batch as done only after that, so every seq is in the table once, whatever
moment the job is killed at. The table never holds Spark's ``_spark_metadata`` and needs none:
any Parquet reader (Spark, pyarrow, pandas, DuckDB) reads it safely. The one thing a reader can
observe mid-crash is a batch partly moved in (a subset of its rows, none twice), completed by
the next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from ..store import consumers
from .journal import data_dir_of, read_bounds
from .source import stream_journal

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
    """The journal table of a lake (what ingest writes and aggregate reads)."""
    return Path(lake) / "journal"


def default_checkpoint(lake: str | os.PathLike[str]) -> Path:
    return Path(lake) / "_checkpoints" / "ingest"


def utc_date(ts: str = "ts") -> Column:
    """The UTC calendar date of a timestamp column, whatever the session time zone."""
    from pyspark.sql import functions as F

    return F.date_from_unix_date(F.floor(F.unix_micros(F.col(ts)) / 86_400_000_000).cast("int"))


@dataclass(slots=True)
class BatchStats:
    batch_id: int
    rows: int
    files: int
    first_seq: int | None
    last_seq: int | None
    seconds: float


def _file_stats(path: Path) -> tuple[int, int | None, int | None]:
    """Rows and seq range of one Parquet file, from its footer (no data read)."""
    meta = pq.read_metadata(path)
    low: int | None = None
    high: int | None = None
    column = meta.schema.names.index("seq") if "seq" in meta.schema.names else -1
    for group in range(meta.num_row_groups):
        if column < 0:
            break
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            continue
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    return meta.num_rows, low, high


class BatchCommitter:
    """The ``foreachBatch`` function of ingest: stage, clear earlier attempts, rename in."""

    def __init__(self, table: Path, staging: Path, progress: Progress | None = None) -> None:
        self.table = table
        self.staging = staging
        self.progress = progress
        self.batches: list[BatchStats] = []

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        stage = self.staging / str(batch_id)
        shutil.rmtree(stage, ignore_errors=True)
        (
            frame.withColumn("date", utc_date())
            .sortWithinPartitions("date", "seq")
            .write.partitionBy("date")
            .parquet(str(stage))
        )
        prefix = f"batch-{batch_id:012d}-"
        for old in self.table.glob(f"date=*/{prefix}*.parquet"):
            old.unlink()  # a previous attempt of this batch: replaced below
        rows, first, last = 0, None, None
        staged = sorted(stage.glob("date=*/*.parquet"))
        for k, path in enumerate(staged):
            count, low, high = _file_stats(path)
            rows += count
            first = low if first is None or (low is not None and low < first) else first
            last = high if last is None or (high is not None and high > last) else last
            target = self.table / path.parent.name / f"{prefix}{k:04d}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            _move(path, target)
        shutil.rmtree(stage, ignore_errors=True)
        stats = BatchStats(batch_id, rows, len(staged), first, last, time.monotonic() - started)
        self.batches.append(stats)
        if self.progress is not None and rows:
            rate = rows / stats.seconds if stats.seconds > 0 else 0.0
            self.progress(
                f"batch {batch_id}: {rows:,} rows (seq {first:,}..{last:,}) in {stats.files}"
                f" file(s), {rate:,.0f} rows/s"
            )


def _move(source: Path, target: Path) -> None:
    """Rename `source` to `target` atomically, copying first across file systems."""
    try:
        os.replace(source, target)
    except OSError:
        temp = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(source, temp)
        os.replace(temp, target)
        source.unlink()


@dataclass(slots=True)
class LakeStats:
    rows: int = 0
    files: int = 0
    dates: list[str] = field(default_factory=list)
    first_seq: int | None = None
    last_seq: int | None = None


def lake_stats(lake: str | os.PathLike[str]) -> LakeStats:
    """Rows, files, dates and seq range of the journal table, from Parquet footers."""
    stats = LakeStats()
    table = journal_table(lake)
    dates = set()
    for path in sorted(table.glob("date=*/*.parquet")):
        count, low, high = _file_stats(path)
        stats.rows += count
        stats.files += 1
        dates.add(path.parent.name.removeprefix("date="))
        if low is not None:
            stats.first_seq = low if stats.first_seq is None else min(stats.first_seq, low)
        if high is not None:
            stats.last_seq = high if stats.last_seq is None else max(stats.last_seq, high)
    stats.dates = sorted(dates)
    return stats


@dataclass(slots=True)
class IngestResult:
    lake: Path
    checkpoint: Path
    batches: list[BatchStats]
    seconds: float
    lake_stats: LakeStats

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)


def committed_offset(spark_checkpoint: Path) -> int | None:
    """The source offset (seq) of the last batch Spark recorded as done in a checkpoint."""
    batches = [int(p.name) for p in (spark_checkpoint / "commits").glob("*") if p.name.isdigit()]
    if not batches:
        return None
    try:
        lines = (spark_checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
        return int(json.loads(lines[-1])["seq"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def consumer_name(checkpoint: Path) -> str:
    """The consumer record name of an ingest query: stable per checkpoint."""
    digest = hashlib.sha1(str(checkpoint.resolve()).encode("utf-8")).hexdigest()[:12]
    return f"ingest-{digest}"


def check_ingest(
    data_dir: str | os.PathLike[str],
    lake: str | os.PathLike[str],
    *,
    trigger_seconds: float = 2.0,
    max_rows_per_batch: int | None = None,
    duration: float | None = None,
) -> None:
    """Refuse what would fail inside Spark, before a session is started and the lake touched:
    a data directory without a broker's store, a lake that is a file, numbers out of range."""
    if not trigger_seconds > 0:
        raise ValueError(f"trigger: expected seconds > 0, got {trigger_seconds:g}")
    if max_rows_per_batch is not None and max_rows_per_batch < 1:
        raise ValueError(f"max rows per batch: expected 1 or more, got {max_rows_per_batch}")
    if duration is not None and not duration >= 0:
        raise ValueError(f"duration: expected seconds >= 0, got {duration:g}")
    if Path(lake).exists() and not Path(lake).is_dir():
        raise ValueError(f"lake {lake}: not a directory")
    read_bounds(data_dir)


def _failure(error: BaseException) -> str:
    """The cause of a failed query in one line: the Python error a source task raised, if
    Spark's message carries one (it wraps it in a traceback and the query's state)."""
    lines = [line.strip() for line in str(error).splitlines()]
    causes = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line)]
    return causes[-1] if causes else lines[0] if lines else type(error).__name__


def run_ingest(
    spark: SparkSession,
    data_dir: str | os.PathLike[str],
    lake: str | os.PathLike[str],
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    continuous: bool = False,
    trigger_seconds: float = 2.0,
    max_rows_per_batch: int | None = None,
    duration: float | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Ingest the journal of `data_dir` into `lake` (see the module docstring).

    Once (default): everything in the journal now, in batches of at most
    `max_rows_per_batch` rows, then return. Continuous: a micro-batch every
    `trigger_seconds` until `stop` is set or `duration` seconds pass; what the journal holds
    at that moment is processed before returning.
    """
    from pyspark.errors import StreamingQueryException

    check_ingest(
        data_dir,
        lake,
        trigger_seconds=trigger_seconds,
        max_rows_per_batch=max_rows_per_batch,
        duration=duration,
    )
    started = time.monotonic()
    lake_path = Path(lake)
    ckpt = Path(checkpoint) if checkpoint is not None else default_checkpoint(lake_path)
    table = journal_table(lake_path)
    table.mkdir(parents=True, exist_ok=True)
    committer = BatchCommitter(table, ckpt / "staging", progress)
    options: dict[str, object] = {"consumer": consumer_name(ckpt)}
    if max_rows_per_batch is not None:
        options["maxRowsPerBatch"] = max_rows_per_batch
    frame = stream_journal(spark, str(data_dir), options=options)
    writer = frame.writeStream.foreachBatch(committer).option(
        "checkpointLocation", str(ckpt / "spark")
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
        with contextlib.suppress(OSError):  # the journal may sit on a read-only disk
            consumers.mark_stopped(
                data_dir_of(data_dir), consumer_name(ckpt), committed_offset(ckpt / "spark")
            )
    return IngestResult(
        lake_path, ckpt, committer.batches, time.monotonic() - started, lake_stats(lake_path)
    )
