"""The seam between ingest and the lake's table formats.

`telemq pipeline ingest` hands each micro-batch of the journal to one `LakeTable`, which
makes the batch's rows part of the table exactly once, whatever moment the job is killed
at: Spark runs a batch again after a crash with the same batch id and the same rows, and
the table must then add nothing it already holds. How depends on the format:

- ``parquet``: a directory of plain Parquet files (`parquet_table.BatchCommitter`): stage,
  delete an earlier attempt's files, rename in;
- ``delta``: one Delta Lake transaction per batch carrying the query and batch as an
  application transaction; a batch whose version is already committed adds nothing;
- ``iceberg``: one Iceberg snapshot per batch whose summary records the query and batch,
  checked before committing.

The other jobs (`aggregate`, `replay`) read a table through the same object, so they need
not know the format. A format that cannot be used (another format at the path, a catalog
that cannot be reached, its library missing) raises `LakeError` with one line naming the
problem before anything is written.

`open_table` makes the table of a format; `detect_format` says which format a lake's journal
table has, for the readers. The default format of ingest is ``delta`` (`DEFAULT_FORMAT`): a
table with a log gives readers a consistent version while ingest and compaction write, which
plain Parquet cannot; ``parquet`` keeps the older layout.

`pause_before_commit` is a test hook, off unless `PAUSE_BEFORE_COMMIT` is set: the ``delta``
and ``iceberg`` tables call it between writing a batch's files and committing them, so that a
crash test can kill the driver at exactly that point.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "QUARANTINE",
    "BatchStats",
    "LakeError",
    "LakeStats",
    "LakeTable",
    "check_format",
    "detect_format",
    "open_table",
    "pause_before_commit",
]

FORMATS = ("delta", "iceberg", "parquet")
QUARANTINE = "quarantine"  # the sibling table of rows whose payload does not fit the schema
DEFAULT_FORMAT = "delta"
LAKE_EXTRA = "pip install 'telemq[lake]'"
PAUSE_BEFORE_COMMIT = "TELEMQ_LAKE_PAUSE_BEFORE_COMMIT"  # "<batch id>:<marker file>"
PAUSE_SECONDS = 3600.0


class LakeError(ValueError):
    """A lake that cannot be used as asked; the message is one line for the user."""


@dataclass(slots=True)
class BatchStats:
    batch_id: int
    rows: int
    files: int
    first_seq: int | None
    last_seq: int | None
    seconds: float


@dataclass(slots=True)
class LakeStats:
    rows: int = 0
    files: int = 0
    dates: list[str] = field(default_factory=list)
    first_seq: int | None = None
    last_seq: int | None = None


class LakeTable(Protocol):
    """One table of the lake in one format: what ingest, compact and the readers need."""

    format_name: str  # "parquet", "delta" or "iceberg"

    def check(self) -> None:
        """Raise `LakeError` if the table cannot be written as this format; writes nothing."""

    def commit_batch(self, frame: DataFrame, batch_id: int) -> BatchStats:
        """Make the batch's rows part of the table exactly once (a repeat adds nothing)."""

    def read(self) -> DataFrame:
        """The table's current version: the journal's columns and ``date``."""

    def stats(self) -> LakeStats:
        """Rows, files, dates and seq range of the table's current version."""

    def compact(self, keep_hours: float) -> str:
        """Merge small files and forget versions older than `keep_hours`; a summary line."""

    def payload_schema(self) -> str | None:
        """The payload schema (DDL, `typed_columns.SCHEMA_PROPERTY`) the table records."""

    def record_payload_schema(self, ddl: str, columns: DataFrame) -> None:
        """Record `ddl` as the table's payload schema, adding the typed columns `columns`
        (an empty DataFrame of the typed fields) that the table lacks. Setting the same
        schema again changes nothing, so a batch replayed after a crash is harmless."""


def pause_before_commit(batch_id: int) -> None:
    """The test hook (see the module docstring): with ``<batch id>:<marker file>`` in the
    environment variable `PAUSE_BEFORE_COMMIT`, the driver, holding that batch's files written
    and not committed, creates the marker file and waits to be killed. Unset, nothing."""
    batch, _, marker = os.environ.get(PAUSE_BEFORE_COMMIT, "").partition(":")
    if not marker or batch != str(batch_id):
        return
    with open(marker, "w", encoding="utf-8") as made:
        made.write(f"batch {batch_id}: files written, not committed\n")
    time.sleep(PAUSE_SECONDS)
    raise RuntimeError(f"{PAUSE_BEFORE_COMMIT}: batch {batch_id} was not killed while paused")


def open_table(
    table_format: str,
    spark: SparkSession,
    lake: str | os.PathLike[str],
    *,
    query_id: str | None,
    catalog: str | None = None,
    table: str | None = None,
    progress: Callable[[str], None] | None = None,
    sibling: str | None = None,
    columns: StructType | None = None,
) -> LakeTable:
    """The journal table of `lake` in `table_format`; `query_id` names the ingest query that
    writes it (None for a reader). `catalog` and `table` are Iceberg's. `sibling` is
    another table beside the journal: ``quarantine`` (`QUARANTINE`), at ``<lake>/quarantine``
    (Iceberg: ``<namespace>.quarantine``, or ``<table>_quarantine`` for a table named other
    than ``journal``); `columns` the Spark schema of a sibling other than ``quarantine``
    (Iceberg makes the table from it; the others from the first batch). Nothing is
    written."""
    if table_format not in FORMATS:
        raise LakeError(f"--format: expected one of {', '.join(FORMATS)}, got {table_format!r}")
    if table_format != "iceberg" and (catalog is not None or table is not None):
        raise LakeError(f"--catalog and --table go with --format iceberg, not {table_format}")
    if table_format == "parquet":
        from .parquet_table import ParquetTable

        return ParquetTable(spark, lake, query_id=query_id, progress=progress, name=sibling)
    if table_format == "delta":
        from .delta_table import DeltaLakeTable

        return DeltaLakeTable(spark, lake, query_id=query_id, progress=progress, name=sibling)
    try:  # imported by name: the module is optional
        module: Any = importlib.import_module(f"{__package__}.iceberg_table")
    except ImportError as error:
        raise LakeError(f"iceberg support is not installed ({error}): {LAKE_EXTRA}") from None
    made: LakeTable = module.IcebergTable(
        spark,
        lake,
        catalog=catalog,
        table=table,
        query_id=query_id,
        progress=progress,
        sibling=sibling,
        columns=columns,
    )
    return made


def check_format(lake: str | os.PathLike[str], table_format: str, catalog: str | None) -> None:
    """What can be checked without Spark: a known format, the Iceberg options with Iceberg
    only, and on a local disk no table of another format at the lake."""
    if table_format not in FORMATS:
        raise LakeError(f"--format: expected one of {', '.join(FORMATS)}, got {table_format!r}")
    if table_format != "iceberg" and catalog is not None:
        raise LakeError(f"--catalog goes with --format iceberg, not {table_format}")
    from .parquet_table import found_local_format, table_uri

    if table_format == "delta" and importlib.util.find_spec("deltalake") is None:
        raise LakeError(f"--format delta needs the deltalake package: {LAKE_EXTRA}")
    found = found_local_format(lake)
    if found is not None and found != table_format and table_format != "iceberg":
        raise LakeError(
            f"{table_uri(lake)} is a {found} table, not {table_format}:"
            f" give --format {found}, or another --lake"
        )


def detect_format(
    spark: SparkSession, lake: str | os.PathLike[str], catalog: str | None = None
) -> str:
    """The format of a lake's journal table, for a reader: ``iceberg`` when a catalog is
    given, else by what the table directory holds (`parquet_table.found_format`)."""
    if catalog is not None:
        return "iceberg"
    from .lakefs import LakeFileSystem, lake_uri
    from .parquet_table import found_format, table_uri

    found = found_format(LakeFileSystem.for_uri(spark, lake_uri(lake)), table_uri(lake))
    if found is None:
        raise LakeError(f"no journal table in {lake}: run telemq pipeline ingest first")
    return found
