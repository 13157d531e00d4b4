"""`telemq pipeline replay`: a subscription's topic filter and SQL filter over a journal range.

The journal range (``--from-seq``/``--to-seq``, inclusive; default: all of it) is read with
the `telemq` source; the topic filters are applied by the reader, the SQL filter as a native
Spark Column (`telemq.filters.spark`), so the matches are the publications the broker would
have delivered to that subscription, one per publication and queue. They are printed (a
preview) and, with an output path, written as Parquet sorted by seq.

Delivering the matches to the subscriber's queue (a backfill) needs the broker to accept a
message for one queue only, which it cannot do yet; `DeliveryUnavailable` says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..filters import Filter, compile_filter
from .journal import journal_bounds, open_reader
from .source import read_journal
from .subscriptions import StoredSubscription, find_subscriptions, match_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DeliveryUnavailable", "ReplayResult", "replay_frame", "run_replay"]

Progress = Callable[[str], None]


class DeliveryUnavailable(RuntimeError):
    """The broker offers no way to put a message on one subscriber's queue."""


@dataclass(slots=True)
class ReplayResult:
    first_seq: int
    last_seq: int
    matched: int
    preview: list[dict[str, Any]] = field(default_factory=list)
    output: Path | None = None
    subscriptions: list[StoredSubscription] = field(default_factory=list)
    seconds: float = 0.0


def replay_frame(
    spark: SparkSession,
    data_dir: str | os.PathLike[str],
    *,
    topics: Sequence[str] | None = None,
    filter: Filter | str | None = None,
    subscriptions: Sequence[StoredSubscription] | None = None,
    from_seq: int | None = None,
    to_seq: int | None = None,
) -> DataFrame:
    """The matching journal rows of the range (a lazy DataFrame)."""
    options: dict[str, object] = {}
    if from_seq is not None:
        options["startingSeq"] = from_seq
        options["failOnDataLoss"] = False  # a range partly trimmed replays what is left
    if to_seq is not None:
        options["endingSeq"] = to_seq
    if subscriptions:
        wanted = sorted({s.topic_filter for s in subscriptions})
        frame = read_journal(spark, str(data_dir), topics=wanted, filter=filter, options=options)
        return frame.where(match_column(subscriptions))
    return read_journal(spark, str(data_dir), topics=topics, filter=filter, options=options)


def run_replay(
    spark: SparkSession,
    data_dir: str | os.PathLike[str],
    *,
    topics: Sequence[str] | None = None,
    filter: str | None = None,
    subscription: str | None = None,
    from_seq: int | None = None,
    to_seq: int | None = None,
    output: str | os.PathLike[str] | None = None,
    limit: int = 20,
    deliver: bool = False,
    progress: Progress | None = None,
) -> ReplayResult:
    """Evaluate a subscription (stored, by name) or topic filters + filter over a range."""
    started = time.monotonic()
    flt = compile_filter(filter) if filter else None
    subs: list[StoredSubscription] = []
    if subscription is not None:
        subs = find_subscriptions(data_dir, subscription)
        if not subs:
            raise LookupError(f"no subscription or queue named {subscription!r} in {data_dir}")
        if progress is not None:
            for s in subs:
                extra = f" WHERE {s.filter}" if s.filter else ""
                progress(f"subscription of queue {s.queue!r}: {s.topic_filter}{extra}")
    elif not topics:
        raise ValueError("replay needs --subscription or --topics")
    if deliver:
        raise DeliveryUnavailable(
            "--deliver needs the broker to put a message on one subscriber's queue, which no"
            " broker command offers yet; use --output to keep the matches"
        )
    conn = open_reader(data_dir)
    try:
        first, last = journal_bounds(conn)
    finally:
        conn.close()
    low = first if from_seq is None else max(first, from_seq)
    high = last if to_seq is None else min(last, to_seq)
    frame = replay_frame(
        spark,
        data_dir,
        topics=topics,
        filter=flt,
        subscriptions=subs,
        from_seq=from_seq,
        to_seq=to_seq,
    ).orderBy("seq")
    if progress is not None:
        progress(f"replaying seq {low:,}..{high:,} on Spark")
    out: Path | None = None
    if output is not None:
        out = Path(output)
        frame.write.mode("overwrite").parquet(str(out))
        frame = spark.read.parquet(str(out)).orderBy("seq")
        matched = frame.count()
        preview = [r.asDict() for r in frame.limit(limit).collect()] if limit else []
    else:
        frame = frame.cache()
        try:
            matched = frame.count()
            preview = [r.asDict() for r in frame.limit(limit).collect()] if limit else []
        finally:
            frame.unpersist()
    return ReplayResult(low, high, matched, preview, out, subs, time.monotonic() - started)
