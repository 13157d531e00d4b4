"""`telemq pipeline ingest`: the journal into a table of the lake, each seq exactly once.

The lake is a directory of tables, on any storage Spark can reach: a local path, or a Hadoop
file system URI (``file:``, ``hdfs://``, ``s3a://`` with its connector). Ingest writes the
journal table ``<lake>/journal`` (partitioned by the UTC date of ``ts``) in one of the table
formats of `table_format` (``delta`` by default, ``iceberg`` or ``parquet``)::

    <lake>/journal/                        the table (its files, and its log if it has one)
    <lake>/quarantine/                     typed columns: rows whose payload does not fit
    <lake>/sparkplug_metrics/, <lake>/sparkplug_quarantine/      --sparkplug (sparkplug_tables)
    <lake>/_checkpoints/ingest/spark/      Spark's checkpoint (default location)
    <lake>/_staging/ingest-<id>/           a batch while it is written (hidden from readers)

How exactly-once works. A streaming query reads the `telemq` source (offsets ``{"seq": N}``
in the checkpoint) and hands each micro-batch to the table's `LakeTable.commit_batch`
(``foreachBatch``). Spark may run a batch again after a crash, with the same batch id and,
from this source, the same rows; the table adds nothing it already holds (each format says
how: `parquet_table`, `delta_table`). Spark records the batch as done only after that, so
every seq is in the table once, whatever moment the job is killed at.

The query is named by its checkpoint (`consumer_name`): the journal's consumer record for
retention, and the application id a table with a log records each committed batch under.

Typed columns (``schema``/``infer``, `typed_columns`). Before the query starts, the driver
settles the payload schema of the run: the one the table records, the one given or inferred
from the next rows (`typed_columns.resolve_schema`: new fields only with ``merge_schema``, a
type change never), and records it in the table (`LakeTable.record_payload_schema`). Each
batch is then split: the rows that fit, with their typed columns, are committed to the
journal table, the others to the ``quarantine`` table beside it (same format, a query id of
its own, ``<query>-quarantine``), each table exactly once by its own commit. A crash between
the two commits is harmless: the replayed batch adds nothing to the journal table and its
quarantine rows to the other.

On a cluster, the lake and the checkpoint must be storage every node reaches at the same URI
(HDFS, an object store, or one network file system mounted at the same path everywhere):
executors write the batch's files, the driver commits them.
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
from .parquet_table import (
    BatchCommitter,
    ParquetTable,
    batch_line,
    journal_table,
    lake_stats,
    table_uri,
    utc_date,
)
from .source import read_journal, stream_journal
from .table_format import (
    DEFAULT_FORMAT,
    QUARANTINE,
    BatchStats,
    LakeError,
    LakeStats,
    LakeTable,
    open_table,
)
from .typed_columns import PayloadSchema, resolve_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "BatchCommitter",
    "IngestResult",
    "ParquetTable",
    "check_ingest",
    "default_checkpoint",
    "journal_table",
    "lake_stats",
    "run_ingest",
    "table_uri",
    "utc_date",
]

Progress = Callable[[str], None]


def default_checkpoint(lake: str | os.PathLike[str]) -> str:
    return join(lake_uri(lake), "_checkpoints", "ingest")


@dataclass(slots=True)
class IngestResult:
    lake: str  # URIs
    checkpoint: str
    batches: list[BatchStats]
    seconds: float
    lake_stats: LakeStats
    table_format: str = DEFAULT_FORMAT
    payload_schema: str | None = None  # the DDL the run wrote typed columns with
    quarantined: int = 0  # rows the run put into the quarantine table
    sparkplug: tuple[int, int] | None = None  # --sparkplug: metric rows, quarantined rows

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
    table_format: str = DEFAULT_FORMAT,
    catalog: str | None = None,
    table_name: str | None = None,
    schema: str | None = None,
    infer: bool = False,
    merge_schema: bool = False,
    sparkplug: bool = False,
) -> IngestResult:
    """Ingest the journal `where` is (a data directory, a store file, or the journal service's
    URL with `journal_options` for its client) into `lake` (see the module docstring).

    Once (default): everything in the journal now, in batches of at most
    `max_rows_per_batch` rows, then return. Continuous: a micro-batch every
    `trigger_seconds` until `stop` is set or `duration` seconds pass; what the journal holds
    at that moment is processed before returning (what comes after is left to the next
    run, so a stop ends even while the broker keeps taking publications).

    `table_format` is the journal table's format (`table_format.FORMATS`); `catalog` and
    `table_name` are Iceberg's. A table of another format at the lake is a `LakeError`,
    raised before anything is written.

    `schema` (Spark DDL) or `infer` give the payloads typed columns, and `merge_schema`
    lets them add fields to the schema the table records (see the module docstring); a
    table that records a schema keeps being written with it when neither is given.
    `sparkplug` also decodes each batch's Sparkplug B publications into the tables
    ``sparkplug_metrics`` and ``sparkplug_quarantine`` (`SparkplugTables`).
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
    if schema is not None and infer:
        raise LakeError("--schema and --infer: give one of them")
    given = PayloadSchema.parse(schema) if schema is not None else None
    started = time.monotonic()
    location = locate(str(where), journal_options)
    lake_u = lake_uri(lake)
    ckpt = lake_uri(checkpoint) if checkpoint is not None else default_checkpoint(lake_u)
    query_id = consumer_name(ckpt)
    # The tables print nothing themselves: `commit` below writes one line per batch.
    lake_table = open_table(
        table_format, spark, lake_u, query_id=query_id, catalog=catalog, table=table_name
    )
    lake_table.check()
    batches: list[BatchStats] = []
    fs = LakeFileSystem.for_uri(spark, ckpt)
    payload_schema = _run_schema(
        lake_table,
        given,
        infer=infer,
        merge=merge_schema,
        sample=lambda: read_journal(
            spark,
            str(where),
            options={
                **(journal_options or {}),
                "startingSeq": (committed_offset(fs, join(ckpt, "spark")) or 0) + 1,
            },
        ),
    )
    quarantine: LakeTable | None = None
    quarantined: list[int] = []
    if payload_schema is not None:
        quarantine = open_table(
            table_format,
            spark,
            lake_u,
            query_id=f"{query_id}-{QUARANTINE}",
            catalog=catalog,
            table=table_name,
            sibling=QUARANTINE,
        )
        quarantine.check()
        ddl = payload_schema.to_ddl()
        if lake_table.payload_schema() != ddl:
            lake_table.record_payload_schema(ddl, _typed_frame(spark, payload_schema))

    decoder = None
    if sparkplug:
        from .sparkplug_tables import SparkplugTables

        decoder = SparkplugTables.open(
            spark, lake_u, table_format, query_id, ckpt, catalog=catalog, table=table_name
        )

    def commit(frame: DataFrame, batch_id: int) -> None:
        held = 0
        if payload_schema is None or quarantine is None:
            stats = lake_table.commit_batch(frame, batch_id)
            line = batch_line(stats)
        else:
            with payload_schema.split(frame) as batch:
                stats = lake_table.commit_batch(batch.rows, batch_id)
                held = quarantine.commit_batch(batch.quarantine, batch_id).rows
            quarantined.append(held)
            line = f"{batch_line(stats)}, {held:,} quarantined"
        batches.append(stats)
        if decoder is not None:
            line += ", " + decoder.commit_batch(frame, batch_id)
        if progress is not None and (stats.rows or held or decoder is not None):
            progress(line)

    options: dict[str, object] = {**(journal_options or {}), "consumer": query_id}
    if max_rows_per_batch is not None:
        options["maxRowsPerBatch"] = max_rows_per_batch
    frame = stream_journal(spark, str(where), options=options)
    writer = frame.writeStream.foreachBatch(commit).option(
        "checkpointLocation", join(ckpt, "spark")
    )
    if continuous:
        writer = writer.trigger(processingTime=f"{trigger_seconds:g} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.queryName(f"telemq-{query_id}").start()
    try:
        if continuous:
            deadline = None if duration is None else time.monotonic() + duration
            while query.isActive and not (stop is not None and stop.is_set()):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                query.awaitTermination(1)
            if query.isActive:
                _drain(query, location.bounds()[1], trigger_seconds)
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
        location.save_offset(query_id, done, False)
    return IngestResult(
        lake_u,
        ckpt,
        batches,
        time.monotonic() - started,
        lake_table.stats(),
        table_format,
        None if payload_schema is None else payload_schema.to_ddl(),
        sum(quarantined),
        None if decoder is None else decoder.totals,
    )


def _drain(query: StreamingQuery, target: int, trigger_seconds: float) -> None:
    """Wait until `query` has committed the journal up to seq `target` (its end when the
    ingest was asked to stop), or has ended, or its triggers have found nothing to read for
    two trigger intervals since it last ran one (a query that starts at the journal's end).
    Not Spark's ``processAllAvailable``: that waits for a trigger that finds no new data,
    which never comes while a broker keeps taking publications. A query that has not run a
    trigger yet (a stop asked for while it starts) is waited for, not taken for idle."""
    idle_since: float | None = None
    while query.isActive:
        if _committed_seq(query) >= target:
            return
        status = query.status
        idle = not status["isDataAvailable"] and not status["isTriggerActive"]
        if not idle or query.lastProgress is None:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > 2 * trigger_seconds + 0.5:
            return
        time.sleep(0.1)  # awaitTermination takes whole seconds


def _committed_seq(query: StreamingQuery) -> int:
    """The source offset (seq) of the query's last completed batch; 0 before any."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return 0
    end = progress["sources"][0]["endOffset"]
    try:
        offset = json.loads(end) if isinstance(end, str) else end
        return int(offset["seq"])
    except (ValueError, TypeError, KeyError):
        return 0


def _run_schema(
    table: LakeTable,
    given: PayloadSchema | None,
    *,
    infer: bool,
    merge: bool,
    sample: Callable[[], DataFrame],
) -> PayloadSchema | None:
    """The payload schema this run writes with (None: no typed columns): the table's, the
    one given, or one inferred from `sample` (the rows after the checkpoint), settled by
    `resolve_schema`. An inferred field the table has with another type keeps the table's
    type (its odd values are quarantined)."""
    ddl = table.payload_schema()
    recorded = PayloadSchema.parse(ddl) if ddl else None
    if infer:
        inferred = PayloadSchema.infer(sample())
        given = inferred if recorded is None else recorded.merge(inferred, keep_types=True)
    if given is None:
        return recorded
    return resolve_schema(recorded, given, merge=merge)


def _typed_frame(spark: SparkSession, schema: PayloadSchema) -> DataFrame:
    """An empty DataFrame of the schema's typed columns (their Spark types)."""
    from pyspark.sql.types import StructType

    return spark.createDataFrame([], StructType.fromJson(json.loads(schema.to_json())))
