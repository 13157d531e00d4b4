"""The data pipeline on Apache Spark (PySpark 4): the broker's journal as a data source.

Theory of operation
-------------------
The broker appends every accepted publication to the journal in its SQLite store, with a
gap-free, increasing ``seq`` (a QoS 1/2 publication is there before it is acknowledged). The
pipeline reads the journal and nothing else of the broker: it never imports the broker. It
reads either over the broker's journal service (HTTP, Arrow IPC; any host, the way for a
cluster) or from the store file (read-only WAL connections that never block the broker, or a
copied store): `location` is the seam between the two.

::

    journal (SQLite, WAL)
        |  telemq.journal.arrow: seq ranges -> pyarrow.RecordBatch (one SQL row per chunk)
        |  served by the broker over HTTP (journal service), or read from the file
        v
    location.JournalService | location.StoreFile   bounds, ranges, consumer offsets
        v
    source.TelemqDataSource  format("telemq"): batch + stream, offsets {"seq": N}
        |                    partitions are seq ranges, read by executors in parallel;
        |                    option sparkplug: metric rows (sparkplug_source)
        +--> ingest     journal -> <lake>/journal by date, exactly-once, through a
        |       |       table_format.LakeTable: delta_table (default), iceberg_table,
        |       |       parquet_table; compact merges a table's small files;
        |       |       typed_columns (--schema: quarantine table beside),
        |       |       sparkplug_tables (--sparkplug: metric tables beside)
        |       +--> aggregate   windowed per-topic stats of numeric fields -> lake
        |                         (+ latest window published back, retained, via the sink)
        +--> replay     a subscription's topic + SQL filter over a seq range
    sink (format("telemq") writer): rows -> PUBLISH over MQTT (telemq.client), or Put on
                                    one queue with the `queue` option; once per
                                    (query, batch, partition, row) when streaming

Guarantees and where they live:

- identical rows for a replayed range: the journal is append-only and partitions are pure
  functions of their seq range (`source`);
- journal retention never deletes what a running query has not committed: stream readers
  keep ``<data_dir>/pipeline-commits/<consumer>.json`` up to date (`telemq.store.consumers`,
  which the broker reads before it trims the journal);
- the lake's journal table holds each seq once across crashes (`ingest`, and the format's
  module: one Delta commit per batch, or the Parquet layout's stage-and-rename);
- the SQL filter means the same in Spark as in the broker: it is compiled by
  `telemq.filters.spark`, which checks JSON types itself instead of casting (Spark 4's ANSI
  mode would raise);
- a replayed streaming batch is not published twice (`sink`).

Modules: `journal` (pyarrow only), `source`, `sink`, `spark` (session and Java check),
`ingest`, `table_format` (the seam to the table formats), `parquet_table`, `delta_table`,
`typed_columns`, `sparkplug_tables`, `sparkplug_source`, `aggregate`, `replay`,
`subscriptions`, `progress`.
Everything that needs pyspark is imported on first use, so ``telemq serve`` runs without
it. See ``docs/pipeline.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "FORMAT",
    "JOURNAL_DDL",
    "JavaNotFoundError",
    "TelemqDataSource",
    "open_table",
    "read_journal",
    "register",
    "retention_floor",
    "run_aggregate",
    "run_ingest",
    "run_replay",
    "spark_session",
    "stream_journal",
]

_HOMES = {
    "FORMAT": "source",
    "JOURNAL_DDL": "journal",
    "JavaNotFoundError": "spark",
    "TelemqDataSource": "source",
    "open_table": "table_format",
    "read_journal": "source",
    "register": "source",
    "retention_floor": "telemq.store.consumers",
    "run_aggregate": "aggregate",
    "run_ingest": "ingest",
    "run_replay": "replay",
    "spark_session": "spark",
    "stream_journal": "source",
}


def __getattr__(name: str) -> Any:
    """Import the public names lazily (most of them need pyspark)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = home if home.startswith("telemq.") else f"{__name__}.{home}"
    return getattr(importlib.import_module(module), name)
