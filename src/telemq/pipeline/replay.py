"""`telemq pipeline replay`: a subscription's topic filter and SQL filter over a journal range.

The journal range (``--from-seq``/``--to-seq``, inclusive; default: all of it) is read with
the `telemq` source; the topic filters are applied by the reader, the SQL filter as a native
Spark Column (`telemq.filters.spark`), so the matches are the publications the broker would
have delivered to that subscription, one per publication and queue. They are printed (a
preview) and, with an output path, written as Parquet sorted by seq. A subscription given by
name comes from the store file of a data directory, or, over the journal service, from the
broker's admin API, which shows subscriptions to administrators only (`_subscriptions`).

With ``deliver``, the matches are then put on the subscriber's queue (a backfill), in seq
order, through the `telemq` sink's ``queue`` option: one telemq ``Put`` command per match,
which the broker puts on that queue only (not routed to anyone else, not retained, not
journaled again). One Spark task writes them all, so they arrive in seq order. The result
says how many the broker took (``delivered``) and refused (``refused``, with the first
reason: a full queue, an unknown one, a QoS 0 message for a queue whose client is offline).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..filters import Filter, compile_filter
from ..journal.client import JournalServiceError
from .journal import parse_topics
from .location import is_service_url, locate, service_client
from .source import read_journal
from .subscriptions import (
    StoredSubscription,
    find_subscriptions,
    match_column,
    subscriptions_from_api,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DeliveryFailed",
    "ReplayPlan",
    "ReplayResult",
    "SubscriptionRefused",
    "check_replay",
    "delivery_queue",
    "replay_frame",
    "run_replay",
]

Progress = Callable[[str], None]


class SubscriptionRefused(ValueError):
    """The broker would not say what a subscription is: over the journal service it is read
    from the admin API, which answers administrators only."""


class DeliveryFailed(RuntimeError):
    """The matches could not be put on the queue (the broker is unreachable, or the task
    failed before the broker answered)."""


@dataclass(slots=True)
class ReplayResult:
    first_seq: int
    last_seq: int
    matched: int
    preview: list[dict[str, Any]] = field(default_factory=list)
    output: Path | None = None
    subscriptions: list[StoredSubscription] = field(default_factory=list)
    seconds: float = 0.0
    queue: str | None = None  # where the matches were delivered (``deliver``)
    delivered: int = 0
    refused: int = 0
    refusal: str = ""  # why the first refused match was refused


@dataclass(slots=True)
class ReplayPlan:
    """What `check_replay` found: everything the Spark job needs that Spark is not needed for."""

    filter: Filter | None
    subscriptions: list[StoredSubscription]
    queue: str | None  # where the matches go (``deliver``)
    first_seq: int  # the range to replay, within the journal's bounds
    last_seq: int


def check_replay(
    where: str | os.PathLike[str],
    *,
    journal_options: Mapping[str, str] | None = None,
    topics: Sequence[str] | None = None,
    filter: str | None = None,
    subscription: str | None = None,
    from_seq: int | None = None,
    to_seq: int | None = None,
    limit: int = 20,
    deliver: bool = False,
    queue: str | None = None,
    qos: int = 1,
) -> ReplayPlan:
    """Refuse what would fail inside Spark, before a session is started: a bad filter, topic
    filter, subscription name, seq range or limit, a data directory without a store, a
    journal service that cannot be reached or refuses the credentials."""
    flt = compile_filter(filter) if filter else None
    subs: list[StoredSubscription] = []
    if subscription is not None:
        subs = _subscriptions(str(where), journal_options, subscription)
        if not subs:
            raise LookupError(f"no subscription or queue named {subscription!r} in {where}")
    elif not topics:
        raise ValueError("replay needs --subscription or --topics")
    else:
        parse_topics(topics)
    target = delivery_queue(subs, queue) if deliver else None
    if qos not in (0, 1, 2):
        raise ValueError(f"QoS must be 0, 1 or 2, got {qos}")
    if from_seq is not None and from_seq < 1:
        raise ValueError(f"from seq: expected 1 or more, got {from_seq}")
    if to_seq is not None and to_seq < 0:
        raise ValueError(f"to seq: expected 0 or more, got {to_seq}")
    if from_seq is not None and to_seq is not None and from_seq > to_seq:
        raise ValueError(f"from seq {from_seq} is after to seq {to_seq}")
    if limit < 0:
        raise ValueError(f"limit: expected 0 or more, got {limit}")
    wanted = sorted({s.topic_filter for s in subs}) if subs else parse_topics(topics)
    first, last = locate(str(where), journal_options, wanted).bounds()
    low = first if from_seq is None else max(first, from_seq)
    high = last if to_seq is None else min(last, to_seq)
    return ReplayPlan(flt, subs, target, low, high)


def _subscriptions(
    where: str, journal_options: Mapping[str, str] | None, name: str
) -> list[StoredSubscription]:
    """The subscriptions `name` stands for: from the store file of a data directory, or
    over the journal service from the broker's admin API, which answers administrators only.
    Its refusal says, in one line, to give the topic filters and SQL filter instead (an
    unreachable broker, or credentials it does not take, is the journal's own error)."""
    if not is_service_url(where):
        return find_subscriptions(where, name)
    try:
        return subscriptions_from_api(service_client(where, journal_options), name)
    except JournalServiceError as error:
        if error.status in (0, 401):
            raise
        raise SubscriptionRefused(
            "--subscription over --journal needs an administrator (the subscription is read"
            f" from the broker's admin API, which answered {error.status}: {error.reason});"
            " give --topics and --filter instead"
        ) from None


def delivery_queue(subscriptions: Sequence[StoredSubscription], queue: str | None) -> str:
    """The queue a backfill goes to: `queue` if given, else the subscriptions' one queue."""
    if queue:
        return queue
    queues = sorted({s.queue for s in subscriptions})
    if not queues:
        raise ValueError("--deliver with --topics needs --queue (the queue to put the matches on)")
    if len(queues) > 1:
        raise ValueError(
            f"the subscriptions belong to several queues ({', '.join(queues)}):"
            " choose one with --queue"
        )
    return queues[0]


def replay_frame(
    spark: SparkSession,
    where: str | os.PathLike[str],
    *,
    journal_options: Mapping[str, str] | None = None,
    topics: Sequence[str] | None = None,
    filter: Filter | str | None = None,
    subscriptions: Sequence[StoredSubscription] | None = None,
    from_seq: int | None = None,
    to_seq: int | None = None,
) -> DataFrame:
    """The matching journal rows of the range (a lazy DataFrame)."""
    options: dict[str, object] = dict(journal_options or {})
    if from_seq is not None:
        options["startingSeq"] = from_seq
        options["failOnDataLoss"] = False  # a range partly trimmed replays what is left
    if to_seq is not None:
        options["endingSeq"] = to_seq
    if subscriptions:
        wanted = sorted({s.topic_filter for s in subscriptions})
        frame = read_journal(spark, str(where), topics=wanted, filter=filter, options=options)
        return frame.where(match_column(subscriptions))
    return read_journal(spark, str(where), topics=topics, filter=filter, options=options)


def run_replay(
    spark: SparkSession,
    where: str | os.PathLike[str],
    *,
    journal_options: Mapping[str, str] | None = None,
    topics: Sequence[str] | None = None,
    filter: str | None = None,
    subscription: str | None = None,
    from_seq: int | None = None,
    to_seq: int | None = None,
    output: str | os.PathLike[str] | None = None,
    limit: int = 20,
    deliver: bool = False,
    queue: str | None = None,
    broker: tuple[str, int] = ("127.0.0.1", 1883),
    qos: int = 1,
    sink_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Evaluate a subscription (stored, by name) or topic filters + filter over a range of
    the journal `where` is (a data directory, a store file, or the journal service's URL
    with `journal_options` for its client).

    With `deliver`, put the matches on `queue` (default: the subscription's queue) through
    the broker at `broker`, at `qos` (default 1: queued while the subscriber is offline);
    `sink_options` go to the sink (``username``, ``password``, ``timeout``...).
    """
    started = time.monotonic()
    plan = check_replay(
        where,
        journal_options=journal_options,
        topics=topics,
        filter=filter,
        subscription=subscription,
        from_seq=from_seq,
        to_seq=to_seq,
        limit=limit,
        deliver=deliver,
        queue=queue,
        qos=qos,
    )
    subs, target, low, high = plan.subscriptions, plan.queue, plan.first_seq, plan.last_seq
    if progress is not None:
        for s in subs:
            extra = f" WHERE {s.filter}" if s.filter else ""
            progress(f"subscription of queue {s.queue!r}: {s.topic_filter}{extra}")
    frame = replay_frame(
        spark,
        where,
        journal_options=journal_options,
        topics=topics,
        filter=plan.filter,
        subscriptions=subs,
        from_seq=from_seq,
        to_seq=high if deliver else to_seq,  # delivered = counted, even on a live journal
    ).orderBy("seq")
    if progress is not None:
        progress(f"replaying seq {low:,}..{high:,} on Spark")
    result = ReplayResult(low, high, 0, subscriptions=subs, queue=target)
    if output is not None:
        result.output = Path(output)
        frame.write.mode("overwrite").parquet(str(result.output))
        frame = spark.read.parquet(str(result.output)).orderBy("seq")
    else:
        frame = frame.cache()
    try:
        result.matched = frame.count()
        result.preview = [r.asDict() for r in frame.limit(limit).collect()] if limit else []
        if target is not None:
            if progress is not None:
                progress(f"delivering {result.matched:,} match(es) to queue {target!r} (QoS {qos})")
            options = {"host": broker[0], "port": str(broker[1]), **(sink_options or {})}
            _deliver(frame, target, qos, options, result)
    finally:
        if output is None:
            frame.unpersist()
    result.seconds = time.monotonic() - started
    return result


def _deliver(
    frame: DataFrame, queue: str, qos: int, options: Mapping[str, str], result: ReplayResult
) -> None:
    """Put the matches on `queue` in seq order (one task) and record the broker's answers."""
    from pyspark.sql import functions as F

    from .source import register

    register(frame.sparkSession)
    rows = (
        frame.repartition(1)
        .sortWithinPartitions("seq")
        .select("topic", "payload", F.lit(qos).alias("qos"))
    )
    with tempfile.TemporaryDirectory(prefix="telemq-replay-") as scratch:
        report = Path(scratch) / "report.json"
        writer = rows.write.format("telemq").options(**options)
        failure: Exception | None = None
        try:
            writer.option("queue", queue).option("report", str(report)).mode("append").save()
        except Exception as exc:  # Spark wraps the sink's error in its own exception types
            failure = exc
        try:
            totals = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            first = str(failure).strip().splitlines()[0] if failure is not None else "no report"
            raise DeliveryFailed(f"delivery to queue {queue!r} failed: {first}") from failure
    result.delivered = int(totals["delivered"])
    result.refused = int(totals["refused"])
    result.refusal = str(totals["refusal"])
