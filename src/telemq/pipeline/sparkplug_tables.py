"""`telemq pipeline ingest --sparkplug`: each batch's Sparkplug B metrics into two tables.

Beside the journal table, in the same format, ingest keeps ``sparkplug_metrics`` (one row per
metric, `sparkplug_schema.metrics_schema`) and ``sparkplug_quarantine`` (what cannot be read,
with the reason). For each micro-batch, the rows whose topic is in the ``spBv1.0`` namespace
are decoded once (`sparkplug_rows.decode_sparkplug`, persisted while both tables are
written) and split into the two frames, each committed by its own table's exactly-once
commit under a query id of its own (``<query>-spmetrics``, ``<query>-spquarantine``).

Aliases resolve through the BIRTHs in force before the batch, kept by a `BirthLedger` beside
the checkpoint (``<checkpoint>/sparkplug``): a batch Spark runs again after a crash starts
from the same BIRTHs and decodes to the same rows, which the tables then add only once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .lakefs import join
from .sparkplug_births import BirthLedger
from .sparkplug_rows import decode_sparkplug, split_decoded
from .sparkplug_schema import metrics_schema, quarantine_schema
from .table_format import LakeTable, open_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["METRICS_TABLE", "QUARANTINE_TABLE", "SparkplugTables"]

METRICS_TABLE = "sparkplug_metrics"
QUARANTINE_TABLE = "sparkplug_quarantine"
_PREFIX = "spBv1.0/"


@dataclass(slots=True)
class SparkplugTables:
    """The two Sparkplug tables of one ingest query, and what this run added to them."""

    metrics: LakeTable
    quarantine: LakeTable
    ledger: BirthLedger
    metric_rows: int = 0
    quarantined: int = 0

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        lake: str,
        table_format: str,
        query_id: str,
        checkpoint: str,
        *,
        catalog: str | None,
        table: str | None,
    ) -> SparkplugTables:
        """Both tables, checked (`LakeError` before anything is written)."""
        made = []
        for sibling, schema, suffix in (
            (METRICS_TABLE, metrics_schema(), "spmetrics"),
            (QUARANTINE_TABLE, quarantine_schema(), "spquarantine"),
        ):
            lake_table = open_table(
                table_format,
                spark,
                lake,
                query_id=f"{query_id}-{suffix}",
                catalog=catalog,
                table=table,
                sibling=sibling,
                columns=schema,
            )
            lake_table.check()
            made.append(lake_table)
        return cls(made[0], made[1], BirthLedger(spark, join(checkpoint, "sparkplug")))

    @property
    def totals(self) -> tuple[int, int]:
        return self.metric_rows, self.quarantined

    def commit_batch(self, frame: DataFrame, batch_id: int) -> str:
        """Decode the batch's Sparkplug rows and commit both tables; the progress text."""
        from pyspark.sql import functions as F

        sparkplug = frame.where(F.col("topic").startswith(_PREFIX))
        decoded = decode_sparkplug(sparkplug, self.ledger, batch_id).persist()
        try:
            metrics, quarantine = split_decoded(decoded)
            added = self.metrics.commit_batch(metrics, batch_id).rows
            held = self.quarantine.commit_batch(quarantine, batch_id).rows
        finally:
            decoded.unpersist()
        self.metric_rows += added
        self.quarantined += held
        return f"{added:,} Sparkplug metric rows, {held:,} Sparkplug quarantined"
