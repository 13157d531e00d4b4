"""The lake's journal as an Apache Iceberg table (`--format iceberg`), through pyiceberg.

Theory of operation
-------------------
An Iceberg table is Parquet data files plus metadata naming, per snapshot, which of them
make up the table; a catalog holds the pointer to the current metadata and moves it with a
compare-and-swap. Spark's executors write the data files, the driver registers them with
pyiceberg; no Iceberg jars in the JVM: Spark reads the files a snapshot lists as Parquet.

Layout (default catalog; ``<name>`` is the table's name without its namespace)::

    <lake>/_iceberg/catalog.db                 pyiceberg's SQL catalog (SQLite)
    <lake>/<name>/metadata/                   Iceberg metadata, manifests
    <lake>/<name>/data/<query>/<batch>-<t>-<r>/date=2024-11-22/part-*.parquet
    <lake>/<name>/data/compact/<t>-<r>/date=2024-11-22/part-*.parquet

``<t>`` is the attempt's start (UTC milliseconds), ``<r>`` random: every attempt writes into a
directory of its own, never renamed. Partitioned by ``day(ts)`` (field ``date``): Spark
writes one directory per UTC date, so the statistics of ``ts`` give a file its partition.

Exactly once. `commit_batch` makes one snapshot per micro-batch whose summary records the
query and batch (``telemq.query-id``, ``telemq.batch-id``), and in the same commit sets the
table property ``telemq.ingest.<query>.last-batch``. A batch counts as committed when that
property is its id or a snapshot in the current ancestry names it. Spark replays only the
latest batch of a query, so a batch below the property means a checkpoint that did not write
this table (replaced, or another job's under the same query id): refused, `LakeError`. The
property survives snapshot expiry, the summaries let other tools see which batch wrote what.
Before writing, and again right before committing, the batch is looked up: a batch already
committed (a replay after a crash between the commit and Spark's own record of it) writes
nothing, or removes what it wrote. The commit carries the catalog's requirement that the
table is still at the snapshot it was built on; a concurrent commit (another query, a
compaction) makes it fail, and it is then re-checked and retried on the new snapshot.

Files of an attempt that never committed are in no snapshot, so no reader sees them. The
next commit of the same query removes them (they belong to the batch being replayed, or a
later one); `compact` removes every unreferenced data file of a batch already committed and
any unreferenced file older than the retention (so never the files of a commit in flight).

`compact` rewrites the files of each date that has more than one small file into one file
per date (up to `COMPACT_MAX_ROWS` rows each), and replaces them in one ``overwrite`` snapshot
that deletes exactly those files: a concurrent ingest commit only adds files, so a conflict
is retried as long as the rewritten files are all still in the table. Then snapshots older
than ``keep_hours`` are expired (the current one never is), and the manifests and data files
no remaining snapshot references are deleted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .iceberg_support import (
    back_off,
    evolve,
    file_key,
    first_line,
    journal_schema,
    quarantine_schema,
    read_schema,
    require_pyiceberg,
    schema_of,
    widen,
    without_password,
)
from .ingest import utc_date
from .journal import JOURNAL_DDL
from .lakefs import FileInfo, LakeFileSystem, join, lake_uri
from .parquet_table import micros_timestamps, write_batch
from .table_format import (
    QUARANTINE,
    BatchStats,
    LakeError,
    LakeStats,
    LakeTable,
    pause_before_commit,
)
from .typed_columns import QUARANTINE_DDL, SCHEMA_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["DEFAULT_TABLE", "IcebergTable"]

Progress = Callable[[str], None]

DEFAULT_TABLE = "telemq.journal"
CATALOG_DIR = "_iceberg"
SUMMARY_QUERY = "telemq.query-id"
SUMMARY_BATCH = "telemq.batch-id"
SUMMARY_COMPACTION = "telemq.compaction"
SMALL_FILE_BYTES = 64 * 1024 * 1024  # a date with two files below this is rewritten
COMPACT_MAX_ROWS = 5_000_000  # rows per file written by compact
ORPHAN_MIN_HOURS = 1.0  # an unreferenced file younger than this may be a commit in flight
COMMIT_ATTEMPTS = 8  # commits conflicting with concurrent ones before giving up
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_ATTEMPT = re.compile(r"^(\d{12})-(\d{13})-[0-9a-f]{8}$")
_COMPACTION = re.compile(r"^(\d{13})-[0-9a-f]{8}$")


class IcebergTable:
    """The journal as one Iceberg table; see the module docstring."""

    format_name = "iceberg"

    def __init__(
        self,
        spark: SparkSession,
        lake: str,
        *,
        catalog: str | None,
        table: str | None,
        query_id: str | None,
        progress: Progress | None = None,
        sibling: str | None = None,
        columns: StructType | None = None,
    ) -> None:
        """`query_id` names the ingest query that commits; None for a reader (aggregate,
        compact), which cannot commit a batch. `sibling` (``quarantine``) is the table of
        that name beside the journal table: ``<namespace>.quarantine``, or
        ``<namespace>.<name>_quarantine`` when the journal table is not named ``journal``.
        `columns` is the Spark schema of another sibling (its ``ts`` is partitioned by)."""
        self.spark = spark
        self.lake = file_key(lake_uri(lake))
        self.identifier = table or DEFAULT_TABLE
        namespace, _, name = self.identifier.rpartition(".")
        if not namespace or not name or not all(map(_NAME.match, self.identifier.split("."))):
            raise LakeError(f"iceberg table {self.identifier!r}: expected namespace.name")
        if query_id is not None and (
            not _NAME.match(query_id) or "." in query_id or query_id == "compact"
        ):
            why = "letters, digits, - and _, not compact"
            raise LakeError(f"iceberg: query id {query_id!r}: {why}")
        if sibling is not None:
            name = sibling if name == "journal" else f"{name}_{sibling}"
            self.identifier = f"{namespace}.{name}"
        self.namespace, self.name = namespace, name
        quarantine = sibling == QUARANTINE
        self.base_schema = quarantine_schema() if quarantine else journal_schema()
        self.base_ddl: str | StructType = QUARANTINE_DDL if quarantine else JOURNAL_DDL
        if columns is not None:
            self.base_schema, self.base_ddl = schema_of(columns), columns
        self.base_columns = tuple(f.name for f in self.base_schema.fields)
        self._query_id = query_id
        self.progress = progress
        self.location = join(self.lake, name)
        self.default_catalog = catalog is None
        if catalog is None:
            if not self.lake.startswith("file:"):
                raise LakeError(
                    f"iceberg lake {lake}: not a local path; give a catalog (a SQL database URL"
                    " or a REST catalog's http(s) URL)"
                )
            path = file_key(join(self.lake, CATALOG_DIR, "catalog.db")).removeprefix("file:")
            catalog = "sqlite:///" + path  # four slashes: an absolute path
        self.catalog_uri = catalog
        self.batches: list[BatchStats] = []
        self._catalog: Catalog | None = None
        self._fs: LakeFileSystem | None = None

    # -- the catalog and the table --------------------------------------------------------

    @property
    def query_id(self) -> str:
        if self._query_id is None:
            raise LakeError(f"iceberg table {self.identifier}: opened to read, not to commit")
        return self._query_id

    @property
    def fs(self) -> LakeFileSystem:
        if self._fs is None:
            self._fs = LakeFileSystem.for_uri(self.spark, self.lake)
        return self._fs

    def _sqlite_file(self) -> Path | None:
        """The database file of a SQLite catalog (None for another catalog or in memory)."""
        path = self.catalog_uri.removeprefix("sqlite:///")
        if path == self.catalog_uri or not path or ":memory:" in path:
            return None
        return Path(path.split("?")[0])

    def _open_catalog(self, *, create: bool) -> Catalog:
        """pyiceberg's catalog named ``telemq`` (further properties from pyiceberg's own
        configuration: ``~/.pyiceberg.yaml``, ``PYICEBERG_CATALOG__TELEMQ__*``); `create`
        makes the default catalog's file and pyiceberg's tables in a SQL database."""
        if self._catalog is not None:
            return self._catalog
        require_pyiceberg()
        from pyiceberg.catalog import load_catalog

        uri = self.catalog_uri
        try:
            if uri.startswith(("http://", "https://")):
                catalog = load_catalog("telemq", type="rest", uri=uri)
            else:
                if create and self.default_catalog:
                    self.fs.mkdirs(join(self.lake, CATALOG_DIR))
                init = str(create).lower()
                catalog = load_catalog(
                    "telemq", type="sql", uri=uri, warehouse=self.lake, init_catalog_tables=init
                )
        except Exception as error:  # the database's or HTTP client's own errors
            raise self._unusable(error) from None
        if create:
            self._catalog = catalog
        return catalog

    def _unusable(self, error: BaseException) -> LakeError:
        message = f"iceberg catalog {self.catalog_uri}: cannot be used: {first_line(error)}"
        return LakeError(without_password(message, self.catalog_uri))

    def _load(self, *, create: bool) -> Table | None:
        """The table, made first if `create`; None if there is none (and not `create`)."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        sqlite = self._sqlite_file()
        if not create and sqlite is not None and not sqlite.exists():
            return None  # nobody has committed yet (opening it would make the file)
        catalog = self._open_catalog(create=create)
        try:
            return catalog.load_table(self.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            if not create:
                return None
        except Exception as error:
            if not create and self._fresh_catalog(error):
                return None
            raise self._unusable(error) from None
        return self._create(catalog)

    @staticmethod
    def _fresh_catalog(error: BaseException) -> bool:
        """A SQL database without pyiceberg's tables yet: a catalog nobody has used."""
        text = str(error).lower()
        return "no such table" in text or ("relation" in text and "does not exist" in text)

    def _create(self, catalog: Catalog) -> Table:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.transforms import DayTransform

        spec = PartitionSpec(
            PartitionField(
                source_id=self.base_schema.find_field("ts").field_id,
                field_id=1000,
                transform=DayTransform(),
                name="date",
            )
        )
        catalog.create_namespace_if_not_exists(self.namespace)
        return catalog.create_table_if_not_exists(
            self.identifier,
            schema=self.base_schema,
            location=self.location,
            partition_spec=spec,
            properties={
                "write.metadata.delete-after-commit.enabled": "true",
                "write.metadata.previous-versions-max": "20",
                "commit.manifest-merge.enabled": "true",  # not one manifest per batch
                "commit.retry.num-retries": "0",  # retried here, the batch checked again
            },
        )

    # -- check ------------------------------------------------------------------------------

    def check(self) -> None:
        """Another format at the lake path, a catalog that cannot be used, a table whose
        schema does not fit, pyiceberg missing: `LakeError`, and nothing written."""
        require_pyiceberg()
        fs = self.fs
        try:
            if fs.exists(join(self.location, "_delta_log")):
                raise LakeError(f"lake {self.lake}: {self.location} is a Delta table, not Iceberg")
            if fs.glob(join(self.location, "date=*")):
                raise LakeError(
                    f"lake {self.lake}: {self.location} is a Parquet journal (date=...),"
                    " not Iceberg"
                )
        except OSError as error:
            raise LakeError(f"lake {self.lake}: {error}") from None
        sqlite = self._sqlite_file()
        made_later = self.default_catalog or sqlite is None or sqlite.parent.is_dir()
        if not made_later and sqlite is not None and not sqlite.exists():
            message = f"cannot be used: no directory {sqlite.parent}"
            message = f"iceberg catalog {self.catalog_uri}: {message}"
            raise LakeError(without_password(message, self.catalog_uri))
        table = self._load(create=False)
        if table is not None:
            self._check_schema(table)

    def _check_schema(self, table: Table) -> None:
        """The journal's columns, optional and of their types, and the table in this lake."""
        found = {f.name: f for f in table.schema().fields}
        wrong = [
            f.name
            for f in self.base_schema.fields
            if f.name not in found
            or found[f.name].required != f.required
            or str(found[f.name].field_type) != str(f.field_type)
        ]
        if wrong:
            raise LakeError(
                f"iceberg table {self.identifier}: not a journal table (columns missing, required"
                f" or of another type: {', '.join(wrong)})"
            )
        if file_key(table.location().rstrip("/")) != self.location:
            where = table.location()
            raise LakeError(
                f"iceberg table {self.identifier} is at {where}, not in lake {self.lake}"
            )

    # -- exactly-once commits ------------------------------------------------------------

    @property
    def _marker(self) -> str:
        return f"telemq.ingest.{self.query_id}.last-batch"

    def _committed(self, table: Table, batch_id: int) -> bool:
        """Whether this query's batch is in the table (see the module docstring)."""
        from pyiceberg.table.snapshots import ancestors_of

        last = table.properties.get(self._marker)
        if last is not None and last.isdigit() and int(last) > batch_id:
            # Spark replays only a query's latest batch: this checkpoint is not the one
            # that wrote the table, and would skip or double rows.
            raise LakeError(
                f"iceberg table {self.identifier}: query {self.query_id} already committed"
                f" batch {last}, and its checkpoint is at batch {batch_id}: a new checkpoint"
                " needs a new query id"
            )
        if last is not None and last.isdigit() and int(last) == batch_id:
            return True
        metadata = table.metadata
        for snapshot in ancestors_of(metadata.current_snapshot(), metadata):
            summary = snapshot.summary
            if (
                summary is not None
                and summary.get(SUMMARY_QUERY) == self.query_id
                and summary.get(SUMMARY_BATCH) == str(batch_id)
            ):
                return True
        return False

    def commit_batch(self, frame: DataFrame, batch_id: int) -> BatchStats:
        """Write the batch's files (executors), then add them in one snapshot (driver), unless
        the batch is already committed."""
        from pyiceberg.exceptions import CommitFailedException

        started = time.monotonic()
        table = self._load(create=True)
        assert table is not None
        if self._committed(table, batch_id):
            return self._done(batch_id, 0, [], started, "already committed")
        attempt = f"{batch_id:012d}-{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:8]}"
        where = join(self.location, "data", self.query_id, attempt)
        columns = [f.name for f in table.schema().fields if f.name in frame.columns]
        write_batch(frame.select(*columns).withColumn("date", utc_date()), where, micros=True)
        files = self.fs.glob(join(where, "date=*", "*.parquet"))
        summary = {SUMMARY_QUERY: self.query_id, SUMMARY_BATCH: str(batch_id)}
        pause_before_commit(batch_id)
        for attempt_no in range(COMMIT_ATTEMPTS):
            back_off(attempt_no)
            table.refresh()
            if self._committed(table, batch_id):
                self.fs.delete(where, recursive=True)
                return self._done(batch_id, 0, [], started, "already committed")
            if not files:  # an empty batch: nothing to record
                self.fs.delete(where, recursive=True)
                return self._done(batch_id, 0, [], started, None)
            transaction = table.transaction()
            transaction.set_properties({self._marker: str(batch_id)})
            transaction.add_files(
                [f.uri for f in files], snapshot_properties=summary, check_duplicate_files=False
            )
            try:
                transaction.commit_transaction()
                break
            except CommitFailedException:
                continue  # a concurrent commit: look again on the new snapshot
        else:
            raise RuntimeError(f"iceberg: batch {batch_id}: {COMMIT_ATTEMPTS} commits conflicted")
        self._clear_attempts(batch_id, keep=attempt)
        return self._done(batch_id, 0, files, started, None)

    def _clear_attempts(self, batch_id: int, keep: str) -> None:
        """Remove this query's attempts of this batch or later ones that never committed."""
        for info in self.fs.glob(join(self.location, "data", self.query_id, "*")):
            match = _ATTEMPT.match(info.name)
            if match and info.name != keep and int(match.group(1)) >= batch_id:
                self.fs.delete(info.uri, recursive=True)

    def _done(
        self, batch_id: int, rows: int, files: list[FileInfo], started: float, note: str | None
    ) -> BatchStats:
        first: int | None = None
        last: int | None = None
        for info in files:
            count, low, high = self.fs.parquet_stats(info.uri)
            rows += count
            first, last = widen(first, last, low, high)
        stats = BatchStats(batch_id, rows, len(files), first, last, time.monotonic() - started)
        self.batches.append(stats)
        if self.progress is not None and note is not None:
            self.progress(f"batch {batch_id}: {note}, nothing added")
        elif self.progress is not None and rows:
            rate = rows / stats.seconds if stats.seconds > 0 else 0.0
            self.progress(
                f"batch {batch_id}: {rows:,} rows (seq {first:,}..{last:,}) in {stats.files}"
                f" file(s), {rate:,.0f} rows/s"
            )
        return stats

    # -- reading ----------------------------------------------------------------------------

    def data_files(self) -> list[Any]:
        """The `DataFile`s of the current snapshot ([] without a table)."""
        table = self._load(create=False)
        if table is None or table.current_snapshot() is None:
            return []
        return [task.file for task in table.scan().plan_files()]

    def read(self) -> DataFrame:
        """The current snapshot: Spark reads the Parquet files it lists."""
        paths = [f.file_path for f in self.data_files()]
        ddl, columns = self._read_schema()
        if not paths:
            empty = self.spark.createDataFrame([], ddl)
            return empty.withColumn("date", utc_date())
        frame = self.spark.read.schema(ddl).parquet(*paths)
        return frame.select(*columns).withColumn("date", utc_date())

    def _read_schema(self) -> tuple[str | StructType, list[str]]:
        return read_schema(self.base_ddl, self.base_columns, self.payload_schema())

    # -- the payload schema -----------------------------------------------------------------

    def payload_schema(self) -> str | None:
        table = self._load(create=False)
        return None if table is None else table.properties.get(SCHEMA_PROPERTY)

    def record_payload_schema(self, ddl: str, columns: DataFrame) -> None:
        """A table property, and the typed columns the table lacks (`evolve`)."""
        table = self._load(create=True)
        assert table is not None
        evolve(table, ddl, columns)

    def stats(self) -> LakeStats:
        """Rows, files, dates and seq range of the current snapshot, from its manifests."""
        from pyiceberg.conversions import from_bytes
        from pyiceberg.types import LongType

        stats = LakeStats()
        dates: set[str] = set()
        epoch = dt.date(1970, 1, 1)
        for data_file in self.data_files():
            stats.rows += data_file.record_count
            stats.files += 1
            day = data_file.partition[0] if len(data_file.partition) else None
            if isinstance(day, int):
                dates.add((epoch + dt.timedelta(days=day)).isoformat())
            bounds = [(data_file.lower_bounds or {}).get(1), (data_file.upper_bounds or {}).get(1)]
            low, high = (None if b is None else int(from_bytes(LongType(), b)) for b in bounds)
            stats.first_seq, stats.last_seq = widen(stats.first_seq, stats.last_seq, low, high)
        stats.dates = sorted(dates)
        return stats

    # -- compaction -------------------------------------------------------------------------

    def compact(self, keep_hours: float) -> str:
        """Rewrite small files, expire old snapshots, delete what nothing references."""
        if not keep_hours >= 0:
            raise LakeError(f"keep: expected hours >= 0, got {keep_hours:g}")
        table = self._load(create=False)
        if table is None:
            return f"iceberg {self.identifier}: no table yet, nothing to compact"
        rewritten, written = self._rewrite(table)
        expired = self._expire(table, keep_hours)
        removed = self._remove_orphans(table, keep_hours)
        return (
            f"iceberg {self.identifier}: {rewritten} file(s) rewritten into {written},"
            f" {expired} snapshot(s) expired, {removed} unreferenced file(s) removed"
        )

    def _rewrite(self, table: Table) -> tuple[int, int]:
        """Each date's small files into one, replaced in one overwrite snapshot."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException
        from pyiceberg.io.pyarrow import parquet_files_to_data_files

        by_date: dict[Any, list[Any]] = {}
        for data_file in self.data_files():
            if data_file.file_size_in_bytes < SMALL_FILE_BYTES:
                by_date.setdefault(data_file.partition[0], []).append(data_file)
        old = [f for group in by_date.values() if len(group) > 1 for f in group]
        if not old:
            return 0, 0
        name = f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:8]}"
        where = join(self.location, "data", "compact", name)
        ddl, columns = self._read_schema()
        frame = self.spark.read.schema(ddl).parquet(*[f.file_path for f in old])
        with micros_timestamps(self.spark):
            (
                frame.select(*columns)
                .withColumn("date", utc_date())
                .repartition("date")
                .sortWithinPartitions("date", "seq")
                .write.option("maxRecordsPerFile", COMPACT_MAX_ROWS)
                .partitionBy("date")
                .parquet(where)
            )
        paths = [f.uri for f in self.fs.glob(join(where, "date=*", "*.parquet"))]
        new = list(parquet_files_to_data_files(table.io, table.metadata, iter(paths)))
        if sum(f.record_count for f in new) != sum(f.record_count for f in old):
            self.fs.delete(where, recursive=True)
            raise RuntimeError(f"iceberg compact: rows differ after rewriting {len(old)} files")
        for attempt_no in range(COMMIT_ATTEMPTS):
            back_off(attempt_no)
            table.refresh()
            live = {f.file_path for f in self.data_files()}
            if not all(f.file_path in live for f in old):
                break  # someone else rewrote some of them: leave it to them
            transaction = table.transaction()
            snapshot = transaction.update_snapshot(snapshot_properties={SUMMARY_COMPACTION: name})
            with snapshot.overwrite() as overwrite:
                for data_file in old:
                    overwrite.delete_data_file(data_file)
                for data_file in new:
                    overwrite.append_data_file(data_file)
            try:
                transaction.commit_transaction()
                return len(old), len(new)
            except (CommitFailedException, ValidationException):
                continue
        self.fs.delete(where, recursive=True)
        return 0, 0

    def _expire(self, table: Table, keep_hours: float) -> int:
        """Expire snapshots older than `keep_hours`; delete their manifest lists and the
        manifests no remaining snapshot uses."""
        from pyiceberg.exceptions import CommitFailedException

        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(hours=keep_hours)
        for attempt_no in range(COMMIT_ATTEMPTS):
            back_off(attempt_no)
            table.refresh()
            before = {s.snapshot_id: s for s in table.metadata.snapshots}
            try:
                table.maintenance.expire_snapshots().older_than(cutoff).commit()
                break
            except CommitFailedException:
                continue
        else:
            return 0
        table.refresh()
        remaining = {s.snapshot_id for s in table.metadata.snapshots}
        gone = [s for key, s in before.items() if key not in remaining]
        if not gone:
            return 0
        kept = {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}
        unused = {m.manifest_path for s in gone for m in s.manifests(table.io)} - kept
        for path in sorted(unused) + [s.manifest_list for s in gone]:
            with contextlib.suppress(OSError):  # already gone
                table.io.delete(path)
        return len(gone)

    def _remove_orphans(self, table: Table, keep_hours: float) -> int:
        """Delete data files no snapshot references: at once for a committed batch, after
        the retention (at least `ORPHAN_MIN_HOURS`) for anything else."""
        table.refresh()
        referenced = {
            file_key(str(p)) for p in table.inspect.all_data_files()["file_path"].to_pylist()
        }
        horizon = time.time() * 1000 - max(keep_hours, ORPHAN_MIN_HOURS) * 3_600_000
        removed = 0
        for owner in self.fs.glob(join(self.location, "data", "*")):
            last = table.properties.get(f"telemq.ingest.{owner.name}.last-batch")
            for attempt in self.fs.glob(join(owner.uri, "*")):
                batch = _ATTEMPT.match(attempt.name)
                compaction = _COMPACTION.match(attempt.name)
                if batch is not None:
                    settled = last is not None and int(batch.group(1)) <= int(last)
                    old = int(batch.group(2)) < horizon
                elif compaction is not None and owner.name == "compact":
                    settled, old = False, int(compaction.group(1)) < horizon
                else:
                    continue  # not ours
                if not (settled or old):
                    continue
                files = self.fs.glob(join(attempt.uri, "date=*", "*.parquet"))
                orphans = [f for f in files if file_key(f.uri) not in referenced]
                if len(orphans) == len(files):  # also a write killed before its first file
                    self.fs.delete(attempt.uri, recursive=True)
                else:
                    for info in orphans:
                        self.fs.delete(info.uri)
                removed += len(orphans)
        return removed


if TYPE_CHECKING:

    def _is_a_lake_table(table: IcebergTable) -> LakeTable:
        return table  # mypy checks that IcebergTable implements the protocol
