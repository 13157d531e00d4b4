"""Pipeline benchmark: the `telemq` source (over the network and from the store file) against
Spark's JSON reader, and the `filter` option (native Spark Columns) against the same filter as
a Python UDF.

For `--rows` messages of JSON telemetry it builds, once per work directory:

- a broker journal (`<work>/data/telemq.db`, written through the store's schema), and
- the same rows as JSON lines (`<work>/messages.jsonl`: the journal's columns, the payload as
  a string), for Spark's own JSON reader with an explicit schema (no inference).

Then it starts a broker on that data directory with its journal service (``telemq serve
--http-port``, loopback) and, in one Spark session, reports input rows per second (best of
`--repeat` runs):

1. journal source over the network (option ``journal``: executors fetch their seq ranges as
   Arrow over HTTP) -> Parquet, against 1b. the source on the store file (option ``path``)
   -> Parquet (target >= 0.7x) and 2. the JSON reader -> Parquet (target >= 0.5x); also both
   sources into the ``noop`` sink (the read alone);
3. source + `filter` as a native Column vs 4. source + the same filter as a Python UDF
   (target >= 2x), read and filtered into Spark's ``noop`` sink so that the filter's cost is
   not hidden behind Parquet's; also the source alone (the floor), the filter evaluated
   inside the reader (the raw format's `filter` option), and an Arrow-optimized UDF when
   pandas is installed.

5. ``telemq pipeline ingest`` (once, from the store file) into each table format
   (Delta, Iceberg, plain Parquet), a fresh lake per run, against
   the Parquet layout (target: Delta and Iceberg >= 0.8x) and Spark's JSON reader -> Parquet.

Run from a checkout: ``python bench/bench_pipeline.py --rows 1000000`` (``--filter`` measures
another filter; ``--ingest-only`` measures only 5, and the JSON reader it is compared with).
The numbers depend on the machine; the ratios are the point.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from telemq.filters import compile_filter
from telemq.journal.client import JournalClient, JournalServiceError
from telemq.pipeline.ingest import run_ingest
from telemq.pipeline.journal import read_bounds
from telemq.pipeline.source import read_journal
from telemq.pipeline.spark import spark_session
from telemq.store import SqliteStore

FILTER = "temp > 30 AND hum < 60"
TS0 = 1_732_233_600_000_000
JSON_SCHEMA = (
    "seq bigint, ts timestamp, topic string, sub_point string, qos int, retain boolean,"
    " payload string, client_id string, user_id string"
)


def messages(rows: int) -> Iterator[tuple[Any, ...]]:
    """Journal rows: seq, ts_us, topic, sub_point, qos, retain, payload, client_id, user_id."""
    rng = random.Random(42)
    for seq in range(1, rows + 1):
        device = seq % 200
        payload = json.dumps(
            {
                "temp": round(rng.uniform(10, 40), 2),
                "hum": rng.randint(20, 90),
                "site": f"s{device % 7}",
                "ok": seq % 5 != 0,
            }
        ).encode()
        yield (
            seq,
            TS0 + seq * 1_000,
            f"sensors/site{device % 7}/dev{device}",
            "",
            seq % 3,
            int(seq % 11 == 0),
            payload,
            f"dev{device}",
            "",
        )


def build(work: Path, rows: int) -> tuple[Path, Path]:
    """The journal and the JSON lines file for `rows` messages (reused when present)."""
    data, lines = work / "data", work / "messages.jsonl"
    marker = work / f"built-{rows}"
    if marker.exists():
        return data, lines
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    store = SqliteStore(data / "telemq.db", "off")
    store.load()  # creates the schema
    store.close()
    started = time.monotonic()
    conn = sqlite3.connect(data / "telemq.db")
    conn.execute("PRAGMA synchronous=OFF")
    insert = (
        "INSERT INTO journal (seq, ts_us, topic, sub_point, qos, retain, payload, client_id,"
        " user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    with lines.open("w", encoding="utf-8") as out:
        batch: list[tuple[Any, ...]] = []
        for row in messages(rows):
            batch.append(row)
            seq, ts, topic, sub_point, qos, retain, payload, client_id, user_id = row
            ts_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 1_000_000))
            record = {
                "seq": seq,
                "ts": f"{ts_text}.{ts % 1_000_000:06d}Z",
                "topic": topic,
                "sub_point": sub_point,
                "qos": qos,
                "retain": bool(retain),
                "payload": payload.decode(),
                "client_id": client_id,
                "user_id": user_id,
            }
            out.write(json.dumps(record) + "\n")
            if len(batch) == 50_000:
                conn.executemany(insert, batch)
                batch.clear()
        conn.executemany(insert, batch)
    conn.commit()
    conn.close()
    marker.touch()
    print(f"built {rows:,} messages in {time.monotonic() - started:.1f}s: {data}, {lines}")
    return data, lines


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def journal_service(data: Path) -> Iterator[str]:
    """A broker serving `data`'s journal over HTTP on loopback; its URL."""
    http_port = _free_port()
    command = [
        sys.executable, "-m", "telemq", "serve", "--host", "127.0.0.1",
        "--port", str(_free_port()), "--http-port", str(http_port), "--data-dir", str(data),
        "--log-level", "warning",
    ]  # fmt: skip
    broker = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                JournalClient(url).bounds()
                break
            except JournalServiceError:
                if broker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the broker did not start its journal service") from None
                time.sleep(0.1)
        yield url
    finally:
        broker.terminate()
        broker.wait(30)


def measure(name: str, rows: int, repeat: int, job: Callable[[], None]) -> float:
    """Best rows/s of `repeat` runs of `job`."""
    best = float("inf")
    for _ in range(repeat):
        started = time.monotonic()
        job()
        best = min(best, time.monotonic() - started)
    rate = rows / best
    print(f"  {name:<44} {best:7.2f}s  {rate:>12,.0f} rows/s", flush=True)
    return rate


def ingest_rates(spark: Any, data: Path, work: Path, count: int, repeat: int) -> dict[str, float]:
    """Rows/s of ``ingest`` (once: one batch of the whole journal) into each table format,
    best of `repeat` rounds, each round running every format in turn (the Parquet layout
    first), each run into a lake of its own (an ingest into a lake with the rows adds
    nothing)."""
    formats = ["parquet"]
    for table_format, package in (("delta", "deltalake"), ("iceberg", "pyiceberg")):
        if importlib.util.find_spec(package) is None:
            print(f"  ({table_format}: {package} is not installed)")
        else:
            formats.append(table_format)
    runs = iter(range(1_000_000))
    warm, _ = build(work / "warm-up", 2_000)  # the stream's Python workers, the libraries
    for table_format in formats:
        run_ingest(
            spark,
            str(warm),
            str(work / "lakes" / f"warm-{table_format}"),
            table_format=table_format,
        )
    rates: dict[str, float] = {}
    for _ in range(repeat):
        for table_format in formats:

            def job(table_format: str = table_format) -> None:
                lake = work / "lakes" / f"{table_format}-{next(runs)}"
                result = run_ingest(spark, str(data), str(lake), table_format=table_format)
                rows = result.lake_stats.rows
                if rows != count:
                    raise RuntimeError(f"{table_format}: {rows} rows in the lake, not {count}")

            rate = measure(f"ingest --format {table_format}", count, 1, job)
            rates[table_format] = max(rate, rates.get(table_format, 0.0))
    shutil.rmtree(work / "lakes", ignore_errors=True)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="messages (default 1M)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--repeat", type=int, default=2, help="runs per measurement (best)")
    parser.add_argument("--workdir", help="keep the data here (default: a temporary directory)")
    parser.add_argument("--filter", default=FILTER, help=f"the filter (default {FILTER!r})")
    parser.add_argument(
        "--ingest-only", action="store_true", help="only ingest per table format (and JSON)"
    )
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="telemq-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data, lines = build(work, args.rows)
    first, last = read_bounds(data)  # a fresh journal: no gaps
    count = last - first + 1
    out = work / "out"

    spark = spark_session(args.master, "telemq-bench")
    cores = spark.sparkContext.defaultParallelism
    print(f"{count:,} messages, Spark {spark.version}, {args.master} ({cores} cores)")

    def parquet(frame: Any) -> Callable[[], None]:
        return lambda: frame.write.mode("overwrite").parquet(str(out))

    def noop(frame: Any) -> Callable[[], None]:
        return lambda: frame.write.format("noop").mode("overwrite").save()

    if args.ingest_only:
        return ingest_only(spark, args, data, lines, work, count, parquet)

    with journal_service(data) as url:
        # Warm up the JVM and the Python workers on a small slice of each path.
        for where in (url, str(data)):
            noop(read_journal(spark, where, options={"endingSeq": 20_000}))()
        noop(spark.read.schema(JSON_SCHEMA).json(str(lines)).limit(20_000))()

        print("read + write Parquet")
        network = measure(
            "telemq source, journal service (HTTP)",
            count,
            args.repeat,
            parquet(read_journal(spark, url)),
        )
        source = measure(
            "telemq source, store file", count, args.repeat, parquet(read_journal(spark, str(data)))
        )
        reader = measure(
            "Spark JSON reader (JSON lines)",
            count,
            args.repeat,
            parquet(spark.read.schema(JSON_SCHEMA).json(str(lines))),
        )
        print("read alone (noop sink)")
        network_read = measure(
            "telemq source, journal service (HTTP)",
            count,
            args.repeat,
            noop(read_journal(spark, url)),
        )
        file_read = measure(
            "telemq source, store file", count, args.repeat, noop(read_journal(spark, str(data)))
        )

    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    text = args.filter
    flt = compile_filter(text)

    def evaluate(payload: bytes | None) -> bool:
        return flt.matches(payload or b"")

    journal = read_journal(spark, str(data))
    print(f"read + filter {text!r} (rows scanned per second, noop sink)")
    floor = measure("telemq source, no filter", count, args.repeat, noop(journal))
    native = measure(
        "filter option (native Spark Column)",
        count,
        args.repeat,
        noop(read_journal(spark, str(data), filter=text)),
    )
    in_reader = measure(
        "filter option inside the reader (Python)",
        count,
        args.repeat,
        noop(spark.read.format("telemq").options(path=str(data), filter=text).load()),
    )
    python_udf = F.udf(evaluate, BooleanType())
    udf = measure("Python UDF", count, args.repeat, noop(journal.filter(python_udf("payload"))))
    udf_arrow = None
    if importlib.util.find_spec("pandas") is not None:  # Arrow-optimized UDFs need it
        arrow_udf = F.udf(evaluate, BooleanType(), useArrow=True)
        udf_arrow = measure(
            "Python UDF (Arrow-optimized)",
            count,
            args.repeat,
            noop(journal.filter(arrow_udf("payload"))),
        )
    else:
        print("  (pandas is not installed: no Arrow-optimized UDF)")
    matched = read_journal(spark, str(data), filter=text).count()
    print(f"  ({matched:,} of {count:,} rows match)")

    def cost(rate: float) -> float:
        """Seconds the filter adds to the plain read."""
        return max(1e-9, count / rate - count / floor)

    print("ratios")
    print(f"  network source / file source (Parquet): {network / source:5.2f}x  (target >= 0.7)")
    print(f"  network source / JSON reader (Parquet): {network / reader:5.2f}x  (target >= 0.5)")
    print(f"  network source / file source (read):    {network_read / file_read:5.2f}x")
    print(f"  file source / JSON reader (Parquet):    {source / reader:5.2f}x  (target >= 0.5)")
    print(f"  filter option / Python UDF (rows/s):    {native / udf:5.2f}x  (target >= 2)")
    print(f"  ... filter evaluation cost, UDF/native: {cost(udf) / cost(native):5.2f}x")
    if udf_arrow is not None:
        print(f"  filter option / Arrow Python UDF:       {native / udf_arrow:5.2f}x")
    print(f"  filter inside the reader / Python UDF:  {in_reader / udf:5.2f}x")
    print("ingest (once) into each table format")
    print_ingest(ingest_rates(spark, data, work, count, args.repeat), reader)
    spark.stop()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def print_ingest(rates: dict[str, float], json_reader: float) -> None:
    """The ratios of ingest per format: against the Parquet layout and the JSON reader."""
    parquet = rates.get("parquet")
    for table_format, rate in rates.items():
        against = f"{rate / parquet:5.2f}x the Parquet layout" if parquet else ""
        goal = "  (target >= 0.8)" if table_format != "parquet" else ""
        print(f"  {table_format:<8} {against}, {rate / json_reader:5.2f}x JSON -> Parquet{goal}")


def ingest_only(
    spark: Any,
    args: argparse.Namespace,
    data: Path,
    lines: Path,
    work: Path,
    count: int,
    parquet: Callable[[Any], Callable[[], None]],
) -> int:
    """`--ingest-only`: the JSON reader -> Parquet, then ingest into each format."""
    spark.read.schema(JSON_SCHEMA).json(str(lines)).limit(20_000).write.format("noop").mode(
        "overwrite"
    ).save()
    print("read + write Parquet")
    reader = measure(
        "Spark JSON reader (JSON lines)",
        count,
        args.repeat,
        parquet(spark.read.schema(JSON_SCHEMA).json(str(lines))),
    )
    print("ingest (once) into each table format")
    rates = ingest_rates(spark, data, work, count, args.repeat)
    print("ratios (best run of each)")
    print_ingest(rates, reader)
    spark.stop()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sys.exit(main())
