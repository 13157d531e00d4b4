"""Sparkplug B decoding benchmark (not a test): metrics per second per core.

``python bench/bench_sparkplug.py [--messages 2000] [--metrics 10] [--spark]``

Builds an NBIRTH and `--messages` NDATA payloads of `--metrics` metrics each (by alias,
without datatypes, as edge nodes send them: Float, Int32, Boolean, String in turn) and
times `telemq.pipeline.sparkplug_rows.decode_batch` on them as one Arrow batch, in this one
process: the work each Spark task does per batch, without Spark. The figure is CPU time
(``time.process_time``), so that it measures one core's work even on a busy machine. The target is 200,000
metrics/s per core. With ``--spark`` the same rows also go through `sparkplug_metrics` on
a ``local[1]`` session (one core), counted with ``count()``: that figure adds Spark's own
cost (JVM <-> Python Arrow transfer, the BIRTH collect) and its start-up, so run it with
enough messages for the decoding to dominate.
"""

from __future__ import annotations

import argparse
import datetime
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--metrics", type=int, default=10)
    parser.add_argument("--spark", action="store_true")
    args = parser.parse_args()

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

    decode_batch(batch.slice(0, 10), births)  # warm up (schema, imports)
    started = time.process_time()  # CPU time of this process: one core's work
    out = decode_batch(batch, births)
    elapsed = time.process_time() - started
    assert out.num_rows == rows * args.metrics, out.num_rows
    assert out.column("reason").null_count == out.num_rows
    total = rows * args.metrics
    print(
        f"decode_batch: {total} metrics in {elapsed:.3f} s of CPU"
        f" = {total / elapsed:,.0f} metrics/s per core"
    )
    if args.spark:
        spark_run(birth, data, args.metrics)


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


if __name__ == "__main__":
    main()
