"""The seam between ingest and the lake's table formats.

`telemq pipeline ingest` hands each micro-batch of the journal to one `LakeTable`, which
makes the batch's rows part of the table exactly once, whatever moment the job is killed
at: Spark runs a batch again after a crash with the same batch id and the same rows, and
the table must then add nothing it already holds. How depends on the format:

- ``parquet``: a directory of plain Parquet files (`ingest.BatchCommitter`): stage, delete
  an earlier attempt's files, rename in;
- ``delta``: one Delta Lake transaction per batch carrying the query and batch as an
  application transaction; a batch whose version is already committed adds nothing;
- ``iceberg``: one Iceberg snapshot per batch whose summary records the query and batch,
  checked before committing.

The other jobs (`aggregate`, `replay`) read a table through the same object, so they need
not know the format. A format that cannot be used (another format at the path, a catalog
that cannot be reached, its library missing) raises `LakeError` with one line naming the
problem before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["BatchStats", "LakeError", "LakeStats", "LakeTable"]


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
