"""Sparkplug B decoding benchmark (not a test): metrics per second per core.

``python bench/bench_sparkplug.py [--messages 2000] [--metrics 10] [--spark]``
``python bench/bench_sparkplug.py --source [--messages 200000] [--repeats 3] [--workdir DIR]``

Builds an NBIRTH and `--messages` NDATA payloads of `--metrics` metrics each (by alias,
without datatypes, as edge nodes send them: Float, Int32, Boolean, String in turn) and
times `telemq.pipeline.sparkplug_rows.decode_batch` on them in Arrow batches of
`sparkplug_source.DECODE_ROWS` rows (as the data source decodes), in this one process: the
work each Spark task does per batch, without Spark. The figure is CPU time
(``time.process_time``), so that it measures one core's work even on a busy machine. The
target is 200,000 metrics/s per core. With ``--spark`` the same rows also go through
`sparkplug_metrics` on a ``local[1]`` session (one core), counted with ``count()``: that
figure adds Spark's own cost (JVM <-> Python Arrow transfer, the BIRTH collect) and is wall
time, so run it with enough messages for the decoding to dominate.

With ``--source`` it measures the Spark source itself, as a user reads metrics: the same
messages are written to a journal (a store file of a data directory, through telemq's
store, as the broker writes it) after the NBIRTH, and read with
``spark.read.format("telemq").option("path", ...).option("sparkplug", "metrics")`` on a
``local[1]`` session (one core for tasks), aggregated over the value columns (so every
metric is decoded and shipped, not just counted). After one warm-up read (the JVM, the
Python workers), each of `--repeats` reads is timed: wall time, and the CPU seconds of the
whole process tree (this driver, the JVM, the Python workers that plan and read: /proc,
Linux). Two figures per read: metrics / wall time on ``local[1]``, and metrics / CPU
seconds of the tree (the per-core cost whatever the load); median and spread are printed.
A query has a fixed cost (about 0.8 CPU-second on the development machine: planning, code
generation): read a few million metrics for a per-core figure of the reading itself.
``--workdir`` keeps the journal (reused when it holds the same messages).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemq.sparkplug import DataType, Metric, Payload, encode_payload

KINDS = [
    (DataType.Float, "float_value", 1.5),
    (DataType.Int32, "int_value", 42),
    (DataType.Boolean, "boolean_value", True),
    (DataType.String, "string_value", "running"),
]


def payloads(messages: int, metrics: int) -> tuple[bytes, list[bytes]]:
    birth = Payload(
        timestamp=1,
        seq=0,
        metrics=tuple(
            Metric(f"m{i}", i, datatype=KINDS[i % 4][0], value=KINDS[i % 4][2])
            for i in range(metrics)
        ),
    )
    data = [
        encode_payload(
            Payload(
                timestamp=2 + n,
                seq=(n + 1) % 256,
                metrics=tuple(
                    Metric(
                        alias=i, timestamp=2 + n, value=KINDS[i % 4][2], wire_field=KINDS[i % 4][1]
                    )
                    for i in range(metrics)
                ),
            )
        )
        for n in range(messages)
    ]
    return encode_payload(birth), data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--metrics", type=int, default=10)
    parser.add_argument("--spark", action="store_true")
    parser.add_argument(
        "--source", action="store_true", help="read a journal through format('telemq')"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed reads (--source)")
    parser.add_argument("--workdir", type=Path, help="where the journal is kept (--source)")
    args = parser.parse_args(argv)
    if args.source:
        return source_main(args)

    import pyarrow as pa

    from telemq.pipeline.sparkplug_births import Birth, Births
    from telemq.sparkplug import MessageType, decode_payload

    birth, data = payloads(args.messages, args.metrics)
    births = Births()
    births.add_node(("G", "E"), Birth.of(0, decode_payload(birth, MessageType.NBIRTH)))
    ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    rows = len(data)
    batch = pa.RecordBatch.from_pydict(
        {
            "seq": list(range(1, rows + 1)),
            "ts": [ts] * rows,
            "topic": ["spBv1.0/G/NDATA/E"] * rows,
            "payload": data,
        }
    )
    from telemq.pipeline.sparkplug_rows import decode_batch
    from telemq.pipeline.sparkplug_source import DECODE_ROWS

    decode_batch(batch.slice(0, 10), births)  # warm up (schema, imports)
    started = time.process_time()  # CPU time of this process: one core's work
    outs = [
        decode_batch(batch.slice(start, DECODE_ROWS), births)
        for start in range(0, rows, DECODE_ROWS)
    ]
    elapsed = time.process_time() - started
    assert sum(out.num_rows for out in outs) == rows * args.metrics
    assert all(out.column("reason").null_count == out.num_rows for out in outs)
    total = rows * args.metrics
    print(
        f"decode_batch: {total} metrics in {elapsed:.3f} s of CPU"
        f" = {total / elapsed:,.0f} metrics/s per core"
    )
    if args.spark:
        spark_run(birth, data, args.metrics)
    return 0


def spark_run(birth: bytes, data: list[bytes], metrics: int) -> None:
    from pyspark.sql import SparkSession

    from telemq.pipeline.sparkplug_rows import sparkplug_metrics

    spark = SparkSession.builder.master("local[1]").getOrCreate()
    try:
        ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
        rows = [(0, ts, "spBv1.0/G/NBIRTH/E", birth)] + [
            (n + 1, ts, "spBv1.0/G/NDATA/E", payload) for n, payload in enumerate(data)
        ]
        frame = spark.createDataFrame(
            rows, "seq BIGINT, ts TIMESTAMP, topic STRING, payload BINARY"
        )
        frame = frame.persist()
        frame.count()
        metric_rows, _ = sparkplug_metrics(frame)
        started = time.perf_counter()
        count = metric_rows.count()
        elapsed = time.perf_counter() - started
        assert count == len(data) * metrics + metrics, count
        print(
            f"spark local[1]: {count} metrics in {elapsed:.3f} s = {count / elapsed:,.0f} metrics/s"
        )
    finally:
        spark.stop()


# -- the Spark source (--source) ------------------------------------------------------------

NODE_TOPIC = "spBv1.0/G/{}/E"


def write_journal(data_dir: Path, birth: bytes, data: list[bytes]) -> Path:
    """The NBIRTH then the NDATA messages, as the journal of a broker's data directory."""
    from telemq.store import JournalRecord, SqliteStore, WriteBatch

    data_dir.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(data_dir / "telemq.db", "off")
    try:
        seq = store.load().next_seq
        ts0 = 1_732_233_600_000_000  # 2024-11-22T00:00:00Z, in microseconds
        batch = WriteBatch()
        topics = [NODE_TOPIC.format("NBIRTH")] + [NODE_TOPIC.format("NDATA")] * len(data)
        for offset, (topic, payload) in enumerate(zip(topics, [birth, *data], strict=True)):
            batch.append_journal(
                JournalRecord(seq + offset, ts0 + offset, topic, "", 0, False, payload, "E", "")
            )
        store.commit(batch)
    finally:
        store.close()
    return data_dir


@dataclass(frozen=True, slots=True)
class TreeCpu:
    """CPU seconds of this process's tree: the driver, the JVM, everything else (the
    Python workers, live or reaped)."""

    driver: float
    jvm: float
    total: float

    @classmethod
    def now(cls) -> TreeCpu:
        from bench_freshness import proc_times  # bench/, beside this script

        times, root = proc_times(), os.getpid()
        total, jvm, todo = 0.0, 0.0, [root]
        while todo:
            pid = todo.pop()
            parent, own, reaped = times.get(pid, (0, 0.0, 0.0))
            total += own + reaped
            if parent == root and _is_java(pid):
                jvm += own
            todo.extend(child for child, entry in times.items() if entry[0] == pid)
        return cls(times[root][1], jvm, total)

    def __sub__(self, other: TreeCpu) -> TreeCpu:
        return TreeCpu(self.driver - other.driver, self.jvm - other.jvm, self.total - other.total)


def _is_java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class SourceRead:
    """One timed read of the metrics view."""

    metrics: int
    wall_s: float
    cpu: TreeCpu

    @property
    def per_wall(self) -> float:
        return self.metrics / self.wall_s

    @property
    def per_cpu(self) -> float:
        return self.metrics / self.cpu.total


def read_metrics(spark: Any, where: Path) -> tuple[int, Any]:
    """The metrics view of the journal at `where`, aggregated over its value columns."""
    from pyspark.sql import functions as F

    frame = (
        spark.read.format("telemq").option("path", str(where)).option("sparkplug", "metrics").load()
    )
    row = frame.agg(
        F.count("*").alias("metrics"),
        F.sum("double_value"),
        F.sum("int_value"),
        F.count("boolean_value"),
        F.count("string_value"),
        F.max("metric_ts"),
    ).collect()[0]
    return int(row["metrics"]), row


def source_run(spark: Any, where: Path, expected: int, repeats: int) -> list[SourceRead]:
    """A warm-up read, then `repeats` timed reads of `expected` metrics."""
    from telemq.pipeline.source import register

    register(spark)
    count, _ = read_metrics(spark, where)  # the JVM's and the Python workers' start
    assert count == expected, (count, expected)
    reads = []
    for _ in range(repeats):
        before, started = TreeCpu.now(), time.perf_counter()
        count, _ = read_metrics(spark, where)
        wall = time.perf_counter() - started
        cpu = TreeCpu.now() - before
        assert count == expected, (count, expected)
        reads.append(SourceRead(count, wall, cpu))
    return reads


def summary(reads: list[SourceRead]) -> str:
    """The median and the spread (min..max) of both figures, and the CPU split."""

    def figure(values: list[float]) -> str:
        return f"median {statistics.median(values):,.0f} ({min(values):,.0f}..{max(values):,.0f})"

    cpu = [r.cpu for r in reads]
    walls = [r.wall_s for r in reads]
    return "\n".join(
        [
            f"source local[1]: {reads[0].metrics} metrics per read, {len(reads)} reads,"
            f" wall {statistics.median(walls):.2f} s median",
            f"  metrics/s (wall, local[1]):         {figure([r.per_wall for r in reads])}",
            f"  metrics/s per CPU second (tree):    {figure([r.per_cpu for r in reads])}",
            f"  CPU s per read (median): tree {statistics.median(c.total for c in cpu):.2f},"
            f" JVM {statistics.median(c.jvm for c in cpu):.2f},"
            f" driver {statistics.median(c.driver for c in cpu):.2f},"
            " Python workers"
            f" {statistics.median(c.total - c.jvm - c.driver for c in cpu):.2f}",
            f"  load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
        ]
    )


def source_main(args: argparse.Namespace) -> int:
    from telemq.pipeline import spark_session

    birth, data = payloads(args.messages, args.metrics)
    expected = args.messages * args.metrics + args.metrics  # the NBIRTH's metrics too
    with tempfile.TemporaryDirectory(prefix="bench-sparkplug-") as scratch:
        work = args.workdir or Path(scratch)
        where = work / f"journal-{args.messages}x{args.metrics}"
        if not (where / "telemq.db").exists():
            write_journal(where, birth, data)
        spark = spark_session("local[1]", "bench-sparkplug")
        try:
            print(summary(source_run(spark, where, expected, args.repeats)))
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
