"""The ``delta`` table format: the journal table as a Delta Lake table, through delta-rs.

Spark writes the data, delta-rs (the ``deltalake`` package, Rust, no JVM jars) writes the log.
For each micro-batch of ingest:

1. the driver reads the table's application transaction version for the ingest query
   (``txn`` action, app id = the query's `ingest.consumer_name`); a batch at or below it is
   already in the table and adds nothing;
2. Spark's executors (or the driver, for a small batch: `parquet_table.write_batch`)
   write the batch's Parquet files (partitioned by the UTC ``date`` of ``ts``, the journal's
   columns, timestamps as microseconds) into ``<lake>/_staging/<query>/<batch id>``, as for
   the ``parquet`` format;
3. files an earlier, uncommitted attempt of the same query left in the table are deleted (their
   names carry the query and the batch id, and no version of the table ever listed them);
4. the staged files are renamed into the table's date directories as
   ``<query>-<batch id>-<attempt>-<k>.parquet`` (through Hadoop's FileSystem, `lakefs`);
5. one Delta transaction adds exactly those files and carries the application transaction
   ``(query, batch id)``; the version is read once more just before it, so a batch committed
   meanwhile adds nothing (its files are removed).

Spark marks the batch done only after step 5. A kill before step 5 leaves files that no
version lists: no Delta reader sees them, and the next run of the query deletes them (step 3).
A kill after it leaves the batch committed; Spark runs it again and step 1 skips it. So every
seq is in the table exactly once, and a reader of any version sees whole batches only.

`compact` rewrites small files with delta-rs's ``optimize.compact`` (one commit that removes
the old files and adds the new ones) and then ``vacuum`` deletes the files versions older
than `keep_hours` removed. Both run beside a live ingest: ingest's commits are blind appends,
and vacuum's default (lite) mode deletes only files the log removed, never the files of a batch
being committed. Files no version lists (a full vacuum's dry run, older than `keep_hours`)
are deleted only when their batch can never commit: its query has committed that batch id or
a later one (a replay of a committed batch killed before it deleted its extra files, an
attempt Spark did not replay). The files of the batch after the last committed one wait for
the next run, which replays that batch and deletes them first (step 3).

Reading (`read`) lists the files of the current version (``DeltaTable.file_uris``) and has
Spark read exactly those.

delta-rs reaches storage through its own object store, not Hadoop's: local paths, and
``s3://`` (``s3a://`` is taken as ``s3://``), ``gs://``, ``az://``/``abfss://`` with the
credentials of their usual environment variables.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped]

from .lakefs import LakeFileSystem, join, lake_uri
from .parquet_table import refuse_other_format, table_uri, utc_date, write_batch
from .table_format import LAKE_EXTRA, BatchStats, LakeError, LakeStats, pause_before_commit
from .typed_columns import SCHEMA_PROPERTY as SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DeltaLakeTable", "delta_location"]

Progress = Callable[[str], None]


def _deltalake() -> Any:
    """The ``deltalake`` module, or `LakeError` naming the extra that installs it."""
    try:
        import deltalake
    except ImportError as error:
        raise LakeError(
            f"--format delta needs the deltalake package ({error}): {LAKE_EXTRA}"
        ) from None
    return deltalake


def delta_location(uri: str) -> str:
    """What delta-rs takes for a Hadoop URI: a local path for ``file:``, ``s3://`` for s3a."""
    if uri.startswith("file:"):
        return "/" + uri.removeprefix("file:").lstrip("/")
    if uri.startswith("s3a://"):
        return "s3://" + uri.removeprefix("s3a://")
    return uri


class DeltaLakeTable:
    """The journal table of `lake` as a Delta table (see the module docstring)."""

    format_name = "delta"

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
        self.delta = _deltalake()
        self.spark = spark
        self.lake = lake_uri(lake)
        self.table = table_uri(self.lake) if name is None else join(self.lake, name)
        self.location = delta_location(self.table)
        self.fs = LakeFileSystem.for_uri(spark, self.lake)
        self.query_id = query_id
        self.staging = join(self.lake, "_staging", query_id or "delta")
        self._swept = False  # this query's uncommitted files of earlier runs deleted
        self._schema_ddl: str | None = None  # to record when the first commit makes the table
        self._table: Any | None = None  # the DeltaTable, once there is one (`_open`)

    # -- the log -------------------------------------------------------------------------

    def _open(self) -> Any | None:
        """The table's current version, or None when there is no table yet. Opened once,
        then brought up to date by reading only the log entries added since (a continuous
        ingest looks twice per micro-batch: not the whole log each time)."""
        try:
            if self._table is not None:
                self._table.update_incremental()
                return self._table
            if not self.delta.DeltaTable.is_deltatable(self.location):
                return None
            self._table = self.delta.DeltaTable(self.location)
            return self._table
        except Exception as error:  # delta-rs raises its own exception types
            raise LakeError(f"{self.table}: not a readable Delta table ({error})") from error

    def committed_batch(self) -> int | None:
        """The last batch of this query the table holds (its application transaction)."""
        if self.query_id is None:
            return None
        table = self._open()
        return None if table is None else table.transaction_version(self.query_id)

    def check(self) -> None:
        refuse_other_format(self.fs, self.table, self.format_name)
        table = self._open()
        if table is not None and table.metadata().partition_columns != ["date"]:
            columns = ", ".join(table.metadata().partition_columns) or "none"
            raise LakeError(f"{self.table}: a Delta table partitioned by {columns}, not date")

    # -- ingest --------------------------------------------------------------------------

    def commit_batch(self, frame: DataFrame, batch_id: int) -> BatchStats:
        if self.query_id is None:
            raise LakeError("commit_batch: this table was opened for reading (no query id)")
        started = time.monotonic()
        done = self.committed_batch()
        if not self._swept:
            self._remove_uncommitted(done)
            self._swept = True
        if done is not None and done >= batch_id:
            return BatchStats(batch_id, 0, 0, None, None, time.monotonic() - started)
        stage = join(self.staging, str(batch_id))
        self.fs.delete(stage, recursive=True)
        dated = frame.withColumn("date", utc_date())
        write_batch(dated, stage, micros=True)  # microseconds: Delta's timestamp unit
        self._remove_uncommitted(done, only=batch_id)
        adds, stats = self._move_in(stage, batch_id)
        self.fs.delete(stage, recursive=True)
        pause_before_commit(batch_id)
        if adds:
            self._commit(adds, dated, batch_id)
        stats.seconds = time.monotonic() - started
        return stats

    def _move_in(self, stage: str, batch_id: int) -> tuple[list[Any], BatchStats]:
        """Rename the staged files into the table; their add actions and the batch's figures."""
        from deltalake.transaction import AddAction

        attempt = uuid.uuid4().hex[:8]
        stats = BatchStats(batch_id, 0, 0, None, None, 0.0)
        adds: list[Any] = []
        now_ms = int(time.time() * 1000)
        for k, info in enumerate(self.fs.glob(join(stage, "date=*", "*.parquet"))):
            count, low, high = self.fs.parquet_stats(info.uri)
            name = f"{info.parent}/{self._prefix(batch_id)}{attempt}-{k:04d}.parquet"
            self.fs.move(info.uri, join(self.table, name))
            figures: dict[str, Any] = {"numRecords": count}
            if low is not None and high is not None:
                figures |= {"minValues": {"seq": low}, "maxValues": {"seq": high}}
            date = info.parent.removeprefix("date=")
            adds.append(
                AddAction(name, info.size, {"date": date}, now_ms, True, json.dumps(figures))
            )
            stats.rows += count
            stats.files += 1
            if low is not None:
                stats.first_seq = low if stats.first_seq is None else min(stats.first_seq, low)
            if high is not None:
                stats.last_seq = high if stats.last_seq is None else max(stats.last_seq, high)
        return adds, stats

    def _commit(self, adds: list[Any], dated: DataFrame, batch_id: int) -> None:
        """One transaction: the batch's files and the query's application transaction."""
        from deltalake import CommitProperties, Transaction
        from pyspark.sql.pandas.types import to_arrow_schema

        assert self.query_id is not None
        table = self._open()
        if table is None:
            schema = to_arrow_schema(dated.schema, timezone="UTC")
            with self._errors("create"):
                configuration = None if self._schema_ddl is None else {SCHEMA: self._schema_ddl}
                table = self.delta.DeltaTable.create(
                    self.location,
                    schema,
                    partition_by=["date"],
                    mode="ignore",
                    configuration=configuration,
                    raise_if_key_not_exists=False,
                )
        done = table.transaction_version(self.query_id)
        if done is not None and done >= batch_id:  # committed meanwhile: these files are extra
            for add in adds:
                self.fs.delete(join(self.table, add.path))
            return
        with self._errors("commit"):
            table.create_write_transaction(
                adds,
                "append",
                table.schema(),
                partition_by=["date"],
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(self.query_id, batch_id)],
                    custom_metadata={"telemq.query": self.query_id, "telemq.batch": batch_id},
                ),
            )

    def _prefix(self, batch_id: int | None = None) -> str:
        """The start of the names of this query's files (of one batch, if given)."""
        return f"{self.query_id}-" + ("" if batch_id is None else f"{batch_id:012d}-")

    def _remove_uncommitted(self, done: int | None, only: int | None = None) -> None:
        """Delete this query's files of batches after `done` (of batch `only`, if given): no
        version lists them, so no reader has seen them."""
        pattern = join(self.table, "date=*", f"{self._prefix(only)}*.parquet")
        for info in self.fs.glob(pattern):
            batch = _batch_of(info.name, self._prefix())
            if batch is not None and (done is None or batch > done):
                self.fs.delete(info.uri)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """delta-rs's errors (a commit conflict, storage) as one `LakeError` line."""
        try:
            yield
        except self.delta.exceptions.DeltaError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise LakeError(f"{what} {self.table}: {type(error).__name__}: {first}") from error

    # -- the payload schema ---------------------------------------------------------------

    def payload_schema(self) -> str | None:
        table = self._open()
        if table is None:
            return self._schema_ddl
        ddl: str | None = table.metadata().configuration.get(SCHEMA)
        return ddl

    def record_payload_schema(self, ddl: str, columns: DataFrame) -> None:
        """In the table's configuration; the typed columns and nested fields it lacks added
        first (Delta's schema evolution: an append of no rows in ``merge`` schema mode, a
        commit of its own, which unlike ``alter.add_columns`` adds fields inside an existing
        STRUCT too). A table not made yet gets both when the first batch makes it."""
        from pyspark.sql.pandas.types import to_arrow_schema

        self._schema_ddl = ddl
        table = self._open()
        if table is None:
            return
        arrow = to_arrow_schema(columns.schema, timezone="UTC")
        grows = not _field_paths(arrow) <= _field_paths(pa.schema(table.schema().to_arrow()))
        with self._errors("evolve the schema of"):
            if grows:
                self.delta.write_deltalake(
                    table, arrow.empty_table(), mode="append", schema_mode="merge"
                )
                table = self._required()
            if table.metadata().configuration.get(SCHEMA) != ddl:
                table.alter.set_table_properties({SCHEMA: ddl}, raise_if_not_exists=False)

    # -- readers -------------------------------------------------------------------------

    def _required(self) -> Any:
        table = self._open()
        if table is None:
            raise LakeError(f"no journal table in {self.lake}: run telemq pipeline ingest first")
        return table

    def file_uris(self) -> list[str]:
        """The data files of the current version, as URIs of the lake's file system."""
        uris: list[str] = self._required().file_uris()
        return [self.table + u[len(self.location) :] for u in uris if u.startswith(self.location)]

    def read(self) -> DataFrame:
        table = self._required()
        uris = self.file_uris()
        if not uris:
            from pyspark.sql.pandas.types import from_arrow_schema

            schema = from_arrow_schema(_arrow_schema(table.schema()))
            return self.spark.createDataFrame([], schema)
        # Files written before a typed column was added lack it: NULL there.
        merge = str(SCHEMA in table.metadata().configuration).lower()
        reader = self.spark.read.option("basePath", self.table).option("mergeSchema", merge)
        return reader.parquet(*uris)

    def stats(self) -> LakeStats:
        table = self._open()
        stats = LakeStats()
        if table is None:
            return stats
        actions = pa.table(table.get_add_actions(flatten=True))
        stats.files = actions.num_rows
        if not actions.num_rows:
            return stats
        stats.rows = int(pa.compute.sum(actions.column("num_records")).as_py() or 0)
        stats.dates = sorted({str(d) for d in actions.column("partition.date").to_pylist()})
        if "min.seq" in actions.column_names:
            stats.first_seq = pa.compute.min(actions.column("min.seq")).as_py()
            stats.last_seq = pa.compute.max(actions.column("max.seq")).as_py()
        return stats

    # -- upkeep --------------------------------------------------------------------------

    def compact(self, keep_hours: float) -> str:
        if not (math.isfinite(keep_hours) and keep_hours >= 0):
            raise LakeError(f"--keep-hours: expected hours >= 0, got {keep_hours:g}")
        hours = math.ceil(keep_hours)
        with self._errors("compact"):
            metrics = self._required().optimize.compact()
            removed = self._required().vacuum(
                retention_hours=hours, enforce_retention_duration=False, dry_run=False
            )
            abandoned = self._remove_abandoned(hours)
        return (
            f"compacted {metrics.get('numFilesRemoved', 0)} file(s) into"
            f" {metrics.get('numFilesAdded', 0)}; deleted {len(removed)} file(s) no version"
            f" of the last {hours} hour(s) needs and {abandoned} file(s) of batches that"
            " never committed"
        )

    def _remove_abandoned(self, hours: int) -> int:
        """Delete the files of batches that never committed and never will: no version
        lists them, and their query has committed that batch id or a later one. A full
        vacuum would delete every file the log does not list, the files of a batch a live
        ingest is about to commit among them."""
        table = self._required()
        untracked = table.vacuum(
            retention_hours=hours, enforce_retention_duration=False, dry_run=True, full=True
        )
        committed: dict[str, int | None] = {}
        deleted = 0
        for path in untracked:
            name = _ABANDONED.match(path.rsplit("/", 1)[-1])
            if name is None:
                continue
            query, batch = name["query"], int(name["batch"])
            if query not in committed:
                committed[query] = table.transaction_version(query)
            done = committed[query]
            if done is not None and batch <= done and self.fs.delete(join(self.table, path)):
                deleted += 1
        return deleted


# The name `_move_in` gives a batch's files: ``<query>-<batch id>-<attempt>-<k>.parquet``.
_ABANDONED = re.compile(r"(?P<query>.+)-(?P<batch>\d{12})-[0-9a-f]{8}-\d{4}\.parquet")


def _batch_of(name: str, prefix: str) -> int | None:
    """The batch id in a file name ``<prefix><batch>-<attempt>-<k>.parquet``."""
    digits = name.removeprefix(prefix).partition("-")[0] if name.startswith(prefix) else ""
    return int(digits) if digits.isdigit() else None


def _field_paths(fields: Any, prefix: str = "") -> set[str]:
    """Every field's dotted path (lower case), those inside STRUCTs too."""
    paths: set[str] = set()
    for field in fields:
        path = prefix + field.name.lower()
        paths.add(path)
        if pa.types.is_struct(field.type):
            paths |= _field_paths(field.type, path + ".")
    return paths


def _arrow_schema(schema: Any) -> Any:
    return pa.schema(schema.to_arrow())
