"""`telemq pipeline aggregate`: windowed per-topic statistics of numeric JSON fields.

Reads the lake's journal table (written by ingest, in any table format: `table_format`
detects it, and a Delta or Iceberg table is read at its current version), and for every
topic and time window (tumbling, on the broker's receive time ``ts``, UTC) computes the
message count and, per numeric payload field, its count, min, max and average. The result
replaces ``<lake>/aggregates/<window>`` (e.g. ``aggregates/1m``): written next to it, then
swapped in with two renames through Hadoop's FileSystem (`lakefs`), so the lake may be any
storage Spark reaches (a local path, ``hdfs://``, ``s3a://``), as for ingest.

Numbers follow the filter language's rules (design section 7): a field counts only where the
payload is JSON and the value is a JSON number. The string ``"31"`` is not a number, and nothing
is cast: Spark 4's ANSI mode makes ``CAST('abc' AS DOUBLE)`` (and ``get_json_object(...) > 30``)
raise, so values are read with ``try_variant_get`` after ``schema_of_variant`` says they are
numeric. Without ``--fields`` the fields are found in the data: the top-level keys that hold a
number in at least one message.

With a broker address, the latest window of each topic is published back as a retained JSON
message on ``<prefix>/<topic>`` through the `telemq` sink. Topics under the prefix are left out
of the input, so published aggregates are never aggregated again.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..filters.spark import document_column
from .lakefs import LakeFileSystem, join, lake_uri
from .parquet_table import utc_date
from .source import register
from .table_format import detect_format, open_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "AggregateResult",
    "aggregate_frame",
    "check_aggregate",
    "parse_window",
    "run_aggregate",
]

Progress = Callable[[str], None]

_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
_NUMERIC = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def parse_window(text: str) -> tuple[str, str]:
    """``"1m"`` -> ``("1 minute", "1m")``: the Spark interval and the table's name."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"window: expected a duration like 30s, 1m, 1h or 1d, got {text!r}")
    count, unit = int(match.group(1)), match.group(2)
    return f"{count} {_UNITS[unit]}{'s' if count > 1 else ''}", f"{count}{unit}"


def _column_name(path: str) -> str:
    return path.replace(".", "_")


def _numeric(doc: Column, path: str) -> Column:
    """The JSON number at `path` of the payload document as a DOUBLE, else NULL."""
    from pyspark.sql import functions as F

    json_path = "$[0]" + "".join(f"['{step}']" for step in path.split("."))
    value = F.try_variant_get(doc, json_path, "variant")
    schema = F.schema_of_variant(value)
    numeric = schema.isin(*_NUMERIC) | schema.startswith("DECIMAL")
    return F.when(numeric, F.try_variant_get(value, "$", "double"))


def discover_fields(frame: DataFrame) -> list[str]:
    """Top-level payload keys holding a JSON number in at least one row."""
    from pyspark.sql import functions as F

    doc = document_column("payload")
    text = F.try_validate_utf8(F.col("payload").cast("string"))
    candidates = [
        row["k"]
        for row in frame.where(doc.isNotNull())
        .select(F.explode(F.json_object_keys(text)).alias("k"))
        .distinct()
        .collect()
        if isinstance(row["k"], str) and _FIELD.match(row["k"])
    ]
    if not candidates:
        return []
    counts = frame.select(
        *[F.count(_numeric(doc, key)).alias(f"c{i}") for i, key in enumerate(candidates)]
    ).first()
    assert counts is not None
    return sorted(key for i, key in enumerate(candidates) if counts[f"c{i}"])


def aggregate_frame(frame: DataFrame, interval: str, fields: Sequence[str]) -> DataFrame:
    """Per (window, topic): ``count`` and ``<field>_count/_min/_max/_avg`` of each field."""
    from pyspark.sql import functions as F

    doc = document_column("payload")
    values = frame.select(
        F.window("ts", interval).alias("w"),
        "topic",
        *[_numeric(doc, f).alias(_column_name(f)) for f in fields],
    )
    stats: list[Column] = [F.count(F.lit(1)).alias("count")]
    for f in fields:
        name = _column_name(f)
        stats += [
            F.count(name).alias(f"{name}_count"),
            F.min(name).alias(f"{name}_min"),
            F.max(name).alias(f"{name}_max"),
            F.avg(name).alias(f"{name}_avg"),
        ]
    names = [f"{_column_name(f)}_{s}" for f in fields for s in ("count", "min", "max", "avg")]
    return (
        values.groupBy("w", "topic")
        .agg(*stats)
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "topic",
            "count",
            *names,
        )
    )


@dataclass(slots=True)
class AggregateResult:
    table: str  # a URI
    window: str
    fields: list[str]
    rows: int
    input_rows: int
    latest: list[dict[str, Any]] = field(default_factory=list)
    published: int = 0
    seconds: float = 0.0


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WINDOW_BOUNDS = ("window_start", "window_end")


def _iso(value: object) -> object:
    if not isinstance(value, datetime):
        return value
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def latest_message(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The JSON document published for a topic's latest window."""
    return {
        "topic": row["topic"],
        "window_start": _iso(row["window_start"]),
        "window_end": _iso(row["window_end"]),
        "count": row["count"],
        "fields": {
            f: {s: row[f"{_column_name(f)}_{s}"] for s in ("count", "min", "max", "avg")}
            for f in fields
        },
    }


def _utc_bounds(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its window bounds (microseconds) as UTC datetimes."""
    for bound in WINDOW_BOUNDS:
        if row.get(bound) is not None:
            row[bound] = _EPOCH + timedelta(microseconds=row[bound])
    return row


def _swap_in(fs: LakeFileSystem, built: str, target: str, label: str) -> None:
    """Replace directory `target` by `built` (two renames; the old copy is then removed)."""
    old = f"{target.rpartition('/')[0]}/.{label}-old-{uuid.uuid4().hex[:8]}"
    if fs.exists(target):
        fs.rename(target, old)
    fs.rename(built, target)
    fs.delete(old, recursive=True)


def check_aggregate(
    lake: str | os.PathLike[str],
    window: str,
    fields: Sequence[str] | None = None,
    *,
    catalog: str | None = None,
) -> tuple[str, str]:
    """Refuse what would fail inside Spark, before a session is started: a lake without a
    journal table (unless an Iceberg catalog holds it), a malformed window or field name.
    Returns `parse_window`'s pair."""
    interval, label = parse_window(window)
    uri = lake_uri(lake)
    local = Path(uri.removeprefix("file:")) if uri.startswith("file:") else None
    journal = None if local is None else local / "journal"
    if catalog is None and journal is not None and not any(journal.glob("date=*/*.parquet")):
        raise FileNotFoundError(f"no journal table in {lake}: run telemq pipeline ingest first")
    for f in fields or ():
        if not _FIELD.match(f):
            raise ValueError(f"fields: {f!r} is not a field name (letters, digits, _ and dots)")
    return interval, label


def run_aggregate(
    spark: SparkSession,
    lake: str | os.PathLike[str],
    window: str = "1m",
    *,
    fields: Sequence[str] | None = None,
    publish_to: tuple[str, int] | None = None,
    topic_prefix: str = "telemq/aggregates",
    sink_options: dict[str, str] | None = None,
    progress: Progress | None = None,
    table_format: str | None = None,
    catalog: str | None = None,
    table_name: str | None = None,
) -> AggregateResult:
    """Aggregate the lake's journal table (see the module docstring); `table_format` None
    means the format the lake holds."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    started = time.monotonic()
    interval, label = check_aggregate(lake, window, fields, catalog=catalog)
    prefix = topic_prefix.rstrip("/")
    kind = table_format or detect_format(spark, lake, catalog)
    journal = open_table(kind, spark, lake, query_id=None, catalog=catalog, table=table_name)
    frame = journal.read().where(
        ~((F.col("topic") == prefix) | F.col("topic").startswith(prefix + "/"))
    )
    chosen = list(fields) if fields else discover_fields(frame)
    if progress is not None:
        progress(f"fields: {', '.join(chosen) if chosen else '(none numeric)'}; window {interval}")
    result = aggregate_frame(frame, interval, chosen)
    fs = LakeFileSystem.for_uri(spark, lake_uri(lake))
    target = join(lake_uri(lake), "aggregates", label)
    fs.mkdirs(join(lake_uri(lake), "aggregates"))
    built = join(lake_uri(lake), "aggregates", f".{label}-new-{uuid.uuid4().hex[:8]}")
    result.withColumn("date", utc_date("window_start")).write.partitionBy("date").parquet(built)
    _swap_in(fs, built, target, label)
    written = spark.read.parquet(target)
    totals = written.agg(F.count(F.lit(1)), F.sum("count")).first()
    assert totals is not None
    rows, input_rows = int(totals[0]), int(totals[1] or 0)
    rank = Window.partitionBy("topic").orderBy(F.col("window_start").desc())
    # The window bounds leave Spark as microseconds since the epoch: collected as
    # timestamps they would become naive datetimes in the driver's local time zone.
    latest = [
        _utc_bounds(r.asDict())
        for r in written.withColumn("r", F.row_number().over(rank))
        .where("r = 1")
        .drop("r", "date")
        .withColumns({bound: F.unix_micros(bound) for bound in WINDOW_BOUNDS})
        .orderBy("topic")
        .collect()
    ]
    outcome = AggregateResult(target, label, chosen, rows, input_rows, latest)
    if publish_to is not None and latest:
        host, port = publish_to
        messages = [
            (f"{prefix}/{r['topic']}", json.dumps(latest_message(r, chosen)).encode(), 1, True)
            for r in latest
        ]
        publish = spark.createDataFrame(
            messages, "topic string, payload binary, qos int, retain boolean"
        )
        options = {"host": host, "port": str(port), **(sink_options or {})}
        register(spark)
        publish.write.format("telemq").options(**options).mode("append").save()
        outcome.published = len(messages)
        if progress is not None:
            progress(
                f"published {len(messages)} retained message(s) under {prefix}/ to {host}:{port}"
            )
    outcome.seconds = time.monotonic() - started
    return outcome
