"""The `telemq` sink: DataFrame rows published to a broker over MQTT.

``df.write.format("telemq")`` and ``df.writeStream.format("telemq")`` publish each row's
``topic`` (string), ``payload`` (binary or string), ``qos`` (int, optional) and ``retain``
(boolean, optional). Each Spark task opens its own MQTT connection (`telemq.client`) and
keeps a window of publications in flight.

With the ``queue`` option the rows are not published but put on that one queue (an MQ
queue is a session) with telemq's ``Put`` command (a backfill: not routed to anyone else,
not retained, not journaled); the window then counts Puts waiting for their reply, and each
reply says whether the row is on the queue (``delivered``) or not (``refused``, with the
broker's reason). A batch write with refused rows fails in its commit, after writing the
totals to the ``report`` file when one is given; a stream logs them and goes on (the rows
are done with: replaying the batch would be refused again).

Options: ``host`` (default 127.0.0.1), ``port`` (1883), ``username``, ``password``,
``clientId`` (prefix of the per-task client ids), ``topic`` (when there is no topic column),
``qos`` (when there is no qos column; default 1), ``retain`` (default false), ``window``
(publications in flight per task, default 64), ``ledger`` (streaming: directory of the
publish ledger), ``timeout`` (seconds), ``queue`` (put on this queue), ``report`` (a JSON
file the commit writes the totals to), ``protocol`` (``3.1.1``, the default, or ``5``: at
MQTT 5.0 a publication the broker refuses, such as one its ACL denies, fails the task with
the reason code instead of being dropped unseen).

Streaming batches are published once. Spark replays a micro-batch whose commit it did not
record (a crash, a kill) with the same batch id, and the telemq source gives the same rows in
the same partitions. Each task therefore records its progress in a ledger keyed by
(query id, batch id, partition) holding the number of rows, in partition order, the broker
has acknowledged (QoS 1 PUBACK, QoS 2 PUBCOMP; QoS 0: written; a Put: its reply). A
replayed task skips that many rows. The query and batch ids come from the task's local
properties, which Spark sets for every micro-batch. The ledger is updated after every
acknowledgement, so a crash can repeat at most the publications in flight at that moment
(``window``), and never a batch that completed. The driver deletes the ledger of older
batches when a batch commits.

Limits: the dedup key is positional, so the rows of a replayed partition must come in the
same order; true for the telemq source and for row-wise transformations, not after a
shuffle (sort within partitions first). Batch writes (``df.write``) have no batch id: a retried
task publishes its rows again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from ..client import MqttClient, QueuePutter

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.types import StructType

__all__ = [
    "MqttBatchWriter",
    "MqttStreamWriter",
    "SinkCommit",
    "SinkOptions",
    "SinkRefused",
    "TaskResult",
    "publish_rows",
]

log = logging.getLogger("telemq.pipeline")

DEFAULT_LEDGER = os.path.join(tempfile.gettempdir(), "telemq-sink-ledger")


PROTOCOLS = {"3.1.1": 4, "5": 5, "5.0": 5}  # the `protocol` option -> MQTT protocol level


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's options and the input columns it found (errors name the option)."""

    host: str = "127.0.0.1"
    port: int = 1883
    username: str | None = None
    password: str | None = None
    client_id: str = "tmq-sink"
    topic: str | None = None
    qos: int = 1
    retain: bool = False
    window: int = 64
    ledger: str = DEFAULT_LEDGER
    timeout: float = 30.0
    queue: str | None = None
    report: str | None = None
    protocol_level: int = 4
    columns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType | None = None) -> SinkOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        columns = tuple(schema.fieldNames()) if schema is not None else ()

        def number(name: str, default: int, low: int, high: int) -> int:
            raw = opts.get(name.lower())
            if raw is None:
                return default
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"telemq sink: option {name}: not an integer: {raw!r}") from None
            if not low <= value <= high:
                raise ValueError(f"telemq sink: option {name}: {value} not in {low}..{high}")
            return value

        protocol = opts.get("protocol", "3.1.1").strip()
        if protocol not in PROTOCOLS:
            raise ValueError(f"telemq sink: option protocol: expected 3.1.1 or 5, got {protocol!r}")
        retain = opts.get("retain", "false").strip().lower()
        if retain not in ("true", "false"):
            raise ValueError(f"telemq sink: option retain: expected true or false, got {retain!r}")
        parsed = cls(
            host=opts.get("host", "127.0.0.1"),
            port=number("port", 1883, 1, 65535),
            username=opts.get("username"),
            password=opts.get("password"),
            client_id=opts.get("clientid", "tmq-sink"),
            topic=opts.get("topic"),
            qos=number("qos", 1, 0, 2),
            retain=retain == "true",
            window=number("window", 64, 1, 65535),
            ledger=opts.get("ledger", DEFAULT_LEDGER),
            timeout=float(opts.get("timeout", "30")),
            queue=opts.get("queue") or None,
            report=opts.get("report") or None,
            protocol_level=PROTOCOLS[protocol],
            columns=columns,
        )
        if columns:
            if "payload" not in columns:
                raise ValueError("telemq sink: the DataFrame needs a payload column")
            if "topic" not in columns and parsed.topic is None:
                raise ValueError("telemq sink: the DataFrame needs a topic column or topic option")
        return parsed


class SinkRefused(RuntimeError):
    """The broker refused some of the rows put on a queue (the message gives the first reason)."""


@dataclass(slots=True)
class TaskResult:
    """What one task did with its rows.

    ``published``: rows sent now; ``skipped``: rows the ledger says were sent before. With
    the ``queue`` option, the published rows split into ``delivered`` and ``refused``, and
    ``refusal`` tells why the first refused one was.
    """

    published: int
    skipped: int
    delivered: int = 0
    refused: int = 0
    refusal: str = ""


@dataclass(slots=True)
class SinkCommit(WriterCommitMessage):
    """What one task did (`TaskResult`), sent to the driver's commit."""

    partition: int
    published: int
    skipped: int
    query: str = ""
    batch: int = -1
    delivered: int = 0
    refused: int = 0
    refusal: str = ""

    @classmethod
    def of(cls, partition: int, result: TaskResult, query: str = "", batch: int = -1) -> SinkCommit:
        return cls(
            partition,
            result.published,
            result.skipped,
            query,
            batch,
            result.delivered,
            result.refused,
            result.refusal,
        )


@dataclass(slots=True)
class Totals:
    """The sum of a job's task results, as the ``report`` file holds it."""

    published: int = 0
    skipped: int = 0
    delivered: int = 0
    refused: int = 0
    refusal: str = ""

    @classmethod
    def of(cls, messages: list[WriterCommitMessage | None]) -> Totals:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        refusals = [m.refusal for m in sorted(done, key=lambda m: m.partition) if m.refusal]
        return cls(
            sum(m.published for m in done),
            sum(m.skipped for m in done),
            sum(m.delivered for m in done),
            sum(m.refused for m in done),
            refusals[0] if refusals else "",
        )

    def write(self, path: str) -> None:
        """Replace `path` with the totals as JSON, in one rename."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        partial.write_text(
            json.dumps(
                {
                    "published": self.published,
                    "skipped": self.skipped,
                    "delivered": self.delivered,
                    "refused": self.refused,
                    "refusal": self.refusal,
                }
            ),
            encoding="utf-8",
        )
        os.replace(partial, target)


def _payload(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


class _Ledger:
    """One task's progress file: how many rows of its partition the broker has."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def done(self) -> int:
        try:
            return int(self.path.read_text(encoding="ascii").strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def record(self, count: int) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        # Fixed width, one pwrite: a killed process leaves the old or the new number.
        os.pwrite(self._fd, f"{count:020d}\n".encode("ascii"), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def publish_rows(
    rows: Iterator[Any], options: SinkOptions, ledger: _Ledger | None = None
) -> TaskResult:
    """Publish `rows` in order (or put them on ``options.queue``); with a ledger, skip the
    rows it says are done."""
    skip = ledger.done() if ledger is not None else 0
    client = MqttClient(
        options.host,
        options.port,
        f"{options.client_id}-{uuid.uuid4().hex[:12]}",
        username=options.username,
        password=options.password,
        timeout=options.timeout,
        window=options.window,
        protocol_level=options.protocol_level,
    )
    putter = QueuePutter(client, options.queue, window=options.window) if options.queue else None
    progress: MqttClient | QueuePutter = putter if putter is not None else client
    client.connect()
    seen = 0
    recorded = 0
    try:
        for row in rows:
            seen += 1
            if seen <= skip:
                continue
            data = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = data.get("topic") or options.topic
            if not topic:
                raise ValueError(f"telemq sink: row {seen} has no topic")
            qos = options.qos if data.get("qos") is None else int(data["qos"])
            payload = _payload(data.get("payload"))
            if putter is not None:
                putter.put(str(topic), payload, qos)
            else:
                retain = data.get("retain")
                client.publish(
                    str(topic), payload, qos, options.retain if retain is None else bool(retain)
                )
            if ledger is not None and progress.completed != recorded:
                recorded = progress.completed
                ledger.record(skip + recorded)
        if putter is not None:
            putter.flush()
        client.flush()
        if ledger is not None and progress.completed != recorded:
            ledger.record(skip + progress.completed)
        client.disconnect()
    finally:
        client.close()
        if ledger is not None:
            ledger.close()
    result = TaskResult(max(0, seen - skip), min(skip, seen))
    if putter is not None:
        result.delivered = putter.delivered
        result.refused = putter.refused
        refusal = putter.first_refusal
        if refusal is not None:
            result.refusal = f"{refusal.topic}: {refusal}"
    return result


class MqttBatchWriter(DataSourceWriter):
    """``df.write.format("telemq")``: every task publishes its partition."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> SinkCommit:
        """Called on an executor, once per partition."""
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        return SinkCommit.of(partition, publish_rows(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """On the driver: report the totals; refused Puts fail the write."""
        totals = Totals.of(messages)
        if self.options.report:
            totals.write(self.options.report)
        log.info("telemq sink: published %d rows", totals.published)
        if totals.refused:
            raise SinkRefused(
                f"telemq sink: the broker refused {totals.refused} of {totals.published}"
                f" row(s) put on queue {self.options.queue!r} (first: {totals.refusal})"
            )


class MqttStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("telemq")``: once per (query, batch, partition) row."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> SinkCommit:
        """Called on an executor, once per partition of each micro-batch."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("telemq sink: no task context (not running in a Spark task?)")
        query = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        partition = context.partitionId()
        if not query or batch is None:
            raise RuntimeError("telemq sink: Spark did not tell this task its query and batch ids")
        ledger = _Ledger(Path(self.options.ledger) / query / batch / f"{partition}.done")
        return SinkCommit.of(
            partition, publish_rows(iterator, self.options, ledger), query, int(batch)
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Called on the driver once the batch is published: the query's older ledgers go
        (Spark never replays a batch before the one it is committing)."""
        done = [m for m in messages if isinstance(m, SinkCommit)]
        totals = Totals.of(messages)
        if self.options.report:
            totals.write(self.options.report)
        log.info(
            "telemq sink: batch %d: %d rows published, %d skipped",
            batchId,
            totals.published,
            totals.skipped,
        )
        if totals.refused:
            log.warning(
                "telemq sink: batch %d: the broker refused %d row(s) put on queue %r (first: %s)",
                batchId,
                totals.refused,
                self.options.queue,
                totals.refusal,
            )
        for query in {m.query for m in done if m.query}:
            with contextlib.suppress(OSError):
                for batch in (Path(self.options.ledger) / query).iterdir():
                    if batch.name.isdigit() and int(batch.name) < batchId:
                        shutil.rmtree(batch, ignore_errors=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Keep the ledger: the replay of this batch needs it."""
