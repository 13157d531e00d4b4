"""Freshness benchmark: how long a publication takes to become a readable row of the lake.

A real broker (``python -m telemq serve``, journal on, SQLite store) takes publications from a
paho client at `--rate` messages/s; each payload carries its publish time and a number. A
continuous ingest (``telemq pipeline ingest --continuous --trigger T``, a process of its own
with its own Spark driver, reading the broker's data directory while the broker serves it, or
its journal service with `--journal-service`) writes the journal into the lake in `--format`.
A reader polls the table every `--poll` seconds, each time with a NEW reader, as a user's
program would:

- ``delta``: ``deltalake.DeltaTable(path)`` re-opened (the current version's file list);
- ``iceberg``: the lake's SQL catalog ``load_table`` (the current snapshot's files);
- ``parquet``: a listing of ``journal/date=*/*.parquet`` (files are renamed in whole).

Files it has not seen before are read; each row's publication is then readable, and its
latency is the poll's time minus the publish time in the payload. After a warm-up (the
ingest's JVM started and the first rows seen, then `--warmup` seconds), the publications of
`--duration` seconds are measured: latency median, p99 and max, and the CPU the broker and
the ingest used over that window (each process with its children: the ingest's JVM and
Python workers), from /proc (Linux).

``--in-process`` runs the ingest in this process instead (`ingest.run_ingest` in a thread, on
a Spark session of its own; ``main(argv, spark=session)`` uses a session the caller has, as
the test suite's smoke test does, with no JVM to start): the same query and commits, but the
ingest's Python driver then shares this process, and the CPU figures split as "ingest" =
the JVM with its Python workers, "bench" = this process (publisher, reader and driver).

Run from a checkout: ``python bench/bench_freshness.py --format delta --rate 1000
--duration 30`` (``--format all`` runs each format in turn; ``--report FILE`` writes the
figures as JSON). The goal on the project's 2-core machine: median <= 1 s, p99 <= 2 s at
1,000 msg/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

import telemq

FORMATS = ("delta", "iceberg", "parquet")
TOPIC = "bench/freshness"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- processes -----------------------------------------------------------------------------


def proc_times() -> dict[int, tuple[int, float, float]]:
    """pid -> (parent, own CPU seconds, CPU seconds of the children it reaped), of every
    process (Linux /proc)."""
    found: dict[int, tuple[int, float, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        found[int(entry.name)] = (int(fields[1]), own, reaped)
    return found


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of `root` and its live descendants, with the children
    each has reaped."""
    times = proc_times()
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        _, own, reaped = times.get(pid, (0, 0.0, 0.0))
        total += own + reaped
        todo.extend(child for child, (parent, _, _) in times.items() if parent == pid)
    return total


def package_env() -> dict[str, str]:
    """The environment for child processes: this telemq on their path."""
    env = dict(os.environ)
    source = str(Path(telemq.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def start_broker(
    data: Path, work: Path, *, http: bool
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """``telemq serve`` on free loopback ports; the process and its ready file's contents."""
    ready = work / "broker-ready.json"
    ready.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "telemq", "serve", "--host", "127.0.0.1", "--port", "0",
        "--data-dir", str(data), "--log-level", "warning", "--ready-file", str(ready),
        "--sys-interval", "3600",
    ]  # fmt: skip
    if http:
        command += ["--http-port", "0"]
    log = (work / "broker.log").open("ab")
    broker = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=log, env=package_env())
    deadline = time.monotonic() + 60
    while not ready.exists():
        if broker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not start (see {work / 'broker.log'})")
        time.sleep(0.05)
    return broker, json.loads(ready.read_text())


def children_cpu_seconds() -> float:
    """CPU seconds of this process's descendants (an in-process ingest's JVM and workers)."""
    return tree_cpu_seconds(os.getpid()) - sum(os.times()[:2])


def stop(process: subprocess.Popen[bytes], signum: int, timeout: float) -> None:
    if process.poll() is None:
        process.send_signal(signum)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- readers -------------------------------------------------------------------------------


def table_files(table_format: str, lake: Path) -> Callable[[], list[str]]:
    """A function listing the data files of the table's current version, opening a new
    reader each time it is called (as a program polling the lake would)."""
    journal = lake / "journal"
    if table_format == "delta":
        from deltalake import DeltaTable

        def delta() -> list[str]:
            if not (journal / "_delta_log").is_dir():
                return []
            return [u.removeprefix("file://") for u in DeltaTable(str(journal)).file_uris()]

        return delta
    if table_format == "iceberg":
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        database = lake / "_iceberg" / "catalog.db"
        catalogs: list[Any] = []

        def iceberg() -> list[str]:
            if not database.exists():
                return []
            if not catalogs:
                catalogs.append(  # named as ingest names it: the SQL catalog keys tables by it
                    load_catalog(
                        "telemq", type="sql", uri=f"sqlite:///{database}", warehouse=f"file:{lake}"
                    )
                )
            try:
                table = catalogs[0].load_table("telemq.journal")
            except (NoSuchTableError, NoSuchNamespaceError):
                return []
            except Exception as error:  # a catalog nobody has written yet
                if "no such table" in str(error).lower():
                    return []
                raise
            if table.current_snapshot() is None:
                return []
            return [t.file.file_path.removeprefix("file:") for t in table.scan().plan_files()]

        return iceberg

    def parquet() -> list[str]:
        return [str(p) for p in journal.glob("date=*/*.parquet")]

    return parquet


@dataclass
class Watch:
    """What the reader has seen: message number -> (publish time, first readable time)."""

    seen: dict[int, tuple[float, float]] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    polls: int = 0
    poll_seconds: float = 0.0
    error: str | None = None

    def first_seen(self) -> bool:
        return bool(self.seen)


def watch_table(
    list_files: Callable[[], list[str]], watch: Watch, interval: float, done: threading.Event
) -> None:
    """Poll the table until `done`; record when each message's row first becomes readable."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    while not done.is_set():
        started = time.time()
        try:
            current = list_files()
        except Exception as error:  # a torn read of a log being written: try again
            watch.error = f"{type(error).__name__}: {error}"
            current = []
        now = time.time()
        for path in current:
            if path in watch.files:
                continue
            watch.files.add(path)
            for payload in pq.read_table(path, columns=["payload"]).column("payload").to_pylist():
                try:
                    message = json.loads(payload)
                    number, sent = int(message["n"]), float(message["t"])
                except (ValueError, KeyError, TypeError):
                    continue
                watch.seen.setdefault(number, (sent, now))
        watch.polls += 1
        watch.poll_seconds += time.time() - started
        done.wait(max(0.0, interval - (time.time() - started)))


# -- the publisher -------------------------------------------------------------------------


@dataclass
class Published:
    """Publish times by message number (written by the publisher thread)."""

    times: dict[int, float] = field(default_factory=dict)


def publish(port: int, rate: float, published: Published, done: threading.Event) -> None:
    """Publish `rate` messages/s (QoS 1, paho's own window) until `done`; each payload carries
    its publish time and number."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-freshness")
    client.max_inflight_messages_set(10_000)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        started = time.monotonic()
        number = 0
        while not done.is_set():
            due = int((time.monotonic() - started) * rate) + 1
            while number < due:
                sent = time.time()
                payload = json.dumps({"n": number, "t": sent, "temp": 20 + number % 15})
                client.publish(TOPIC, payload, qos=1)
                published.times[number] = sent
                number += 1
            done.wait(max(0.0, started + number / rate - time.monotonic()))
    finally:
        client.loop_stop()
        client.disconnect()


# -- the ingest ----------------------------------------------------------------------------


class IngestProcess:
    """``telemq pipeline ingest --continuous`` in a process of its own."""

    def __init__(self, args: argparse.Namespace, source: list[str], lake: Path, work: Path):
        table_format = args.format_now
        command = [
            sys.executable, "-m", "telemq", "pipeline", "ingest", *source,
            "--lake", str(lake), "--format", table_format, "--continuous",
            "--trigger", f"{args.trigger:g}", "--master", args.master,
            "--spark-log", str(work / "spark.log"),
        ]  # fmt: skip
        if args.max_rows_per_batch:
            command += ["--max-rows-per-batch", str(args.max_rows_per_batch)]
        for setting in args.conf:
            command += ["--conf", setting]
        self.log = work / f"ingest-{table_format}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=package_env()
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        stop(self.process, signal.SIGTERM, 120)

    def batch_seconds(self) -> list[float]:
        return _batch_seconds(self.log)


class IngestThread:
    """`ingest.run_ingest` (continuous) in a thread of this process, on `spark`."""

    def __init__(self, spark: Any, args: argparse.Namespace, data: Path, lake: Path) -> None:
        from telemq.pipeline.ingest import IngestResult, run_ingest

        self.log = f"the ingest thread of {lake}"
        self.done = threading.Event()
        self.result: IngestResult | None = None
        self.error: BaseException | None = None

        def ingest() -> None:
            try:
                self.result = run_ingest(
                    spark,
                    data,
                    lake,
                    continuous=True,
                    trigger_seconds=args.trigger,
                    max_rows_per_batch=args.max_rows_per_batch,
                    stop=self.done,
                    table_format=args.format_now,
                )
            except BaseException as error:  # reported by stop()
                self.error = error

        self.thread = threading.Thread(target=ingest, name="bench-ingest")
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def cpu_seconds(self) -> float:
        return children_cpu_seconds()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(120)
        error, self.error = self.error, None
        if error is not None:
            raise RuntimeError(f"the ingest failed: {error}") from error

    def batch_seconds(self) -> list[float]:
        batches = self.result.batches if self.result is not None else []
        return [b.seconds for b in batches if b.rows]


# -- one run -------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Result:
    format: str
    rate: float
    trigger: float
    published: int  # in the measured window
    readable: int  # of those, seen by the reader
    median_s: float
    p99_s: float
    max_s: float
    broker_cpu: float  # cores, averaged over the window
    ingest_cpu: float
    bench_cpu: float  # publisher and reader (this process)
    window_s: float
    polls: int
    mean_poll_s: float
    batches: int
    mean_batch_s: float
    reader_error: str | None
    load_average: float  # the machine's 1-minute load average at the end of the window


def run_format(
    args: argparse.Namespace, table_format: str, work: Path, spark: Any = None
) -> Result:
    work.mkdir(parents=True, exist_ok=True)
    data, lake = work / "data", work / "lake"
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(lake, ignore_errors=True)
    args.format_now = table_format
    broker, ready = start_broker(data, work, http=args.journal_service)
    ingest: IngestProcess | IngestThread | None = None
    done, seen_done = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    try:
        port = int(ready["listeners"][0]["ports"][0])
        if spark is not None:
            ingest = IngestThread(spark, args, data, lake)
        else:
            if args.journal_service:
                source = ["--journal", f"http://127.0.0.1:{ready['http'][0]}"]
            else:
                source = ["--data-dir", str(data)]
            ingest = IngestProcess(args, source, lake, work)
        published, watch = Published(), Watch()
        threads = [
            threading.Thread(target=publish, args=(port, args.rate, published, done)),
            threading.Thread(
                target=watch_table,
                args=(table_files(table_format, lake), watch, args.poll, seen_done),
            ),
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + args.start_timeout
        while not watch.first_seen():  # the ingest's JVM is up and committing
            if not ingest.alive() or time.monotonic() > deadline:
                ingest.stop()  # raises the in-process ingest's error, if any
                raise RuntimeError(f"no rows reached the lake (see {ingest.log})")
            time.sleep(0.1)
        time.sleep(args.warmup)
        cpu = [tree_cpu_seconds(broker.pid), ingest.cpu_seconds()]
        bench_cpu = time.process_time()
        first = len(published.times)
        window_start = time.monotonic()
        time.sleep(args.duration)
        window = time.monotonic() - window_start
        cpu = [tree_cpu_seconds(broker.pid) - cpu[0], ingest.cpu_seconds() - cpu[1]]
        bench_cpu = time.process_time() - bench_cpu
        last = len(published.times)
        done.set()
        wanted = range(first, last)
        deadline = time.monotonic() + args.drain_timeout
        while any(n not in watch.seen for n in wanted) and time.monotonic() < deadline:
            time.sleep(0.2)
        seen_done.set()
        for thread in threads:
            thread.join(30)
        latencies = [watch.seen[n][1] - watch.seen[n][0] for n in wanted if n in watch.seen]
        ingest.stop()
        batches = ingest.batch_seconds()
        return Result(
            format=table_format,
            rate=args.rate,
            trigger=args.trigger,
            published=len(wanted),
            readable=len(latencies),
            median_s=percentile(latencies, 0.5) if latencies else float("nan"),
            p99_s=percentile(latencies, 0.99) if latencies else float("nan"),
            max_s=max(latencies) if latencies else float("nan"),
            broker_cpu=cpu[0] / window,
            ingest_cpu=cpu[1] / window,
            bench_cpu=bench_cpu / window,
            window_s=window,
            polls=watch.polls,
            mean_poll_s=watch.poll_seconds / max(1, watch.polls),
            batches=len(batches),
            mean_batch_s=sum(batches) / len(batches) if batches else float("nan"),
            reader_error=watch.error,
            load_average=os.getloadavg()[0],
        )
    finally:
        done.set()
        seen_done.set()
        for thread in threads:
            thread.join(30)
        try:
            if ingest is not None:
                ingest.stop()
        finally:
            stop(broker, signal.SIGTERM, 30)


def _batch_seconds(progress: Path) -> list[float]:
    """Each committed batch's commit time, from ingest's progress lines (rows / rows/s),
    once per batch id."""
    seconds: dict[str, float] = {}
    for text in progress.read_text(errors="replace").splitlines():
        line = text[text.index("batch ") :] if "batch " in text else ""
        if not line or " rows/s" not in line:
            continue
        try:
            batch, rest = line.removeprefix("batch ").split(": ", 1)
            rows = int(rest.split(" rows", 1)[0].replace(",", ""))
            rate = float(rest.rsplit(", ", 1)[1].split(" rows/s")[0].replace(",", ""))
        except (IndexError, ValueError):
            continue
        if rows and rate:
            seconds[batch] = rows / rate
    return list(seconds.values())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", default="all", choices=(*FORMATS, "all"))
    parser.add_argument("--rate", type=float, default=1000.0, help="messages/s (default 1000)")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the first row")
    parser.add_argument("--trigger", type=float, default=0.2, help="ingest --trigger seconds")
    parser.add_argument("--max-rows-per-batch", type=int, help="ingest --max-rows-per-batch")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between reads")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--conf", action="append", default=[], help="a Spark KEY=VALUE")
    parser.add_argument("--journal-service", action="store_true", help="ingest over HTTP")
    parser.add_argument(
        "--in-process", action="store_true", help="run the ingest in this process (a thread)"
    )
    parser.add_argument("--workdir", help="work here (default: a temporary directory)")
    parser.add_argument("--report", help="write the figures to this JSON file")
    parser.add_argument("--start-timeout", type=float, default=180.0, help=argparse.SUPPRESS)
    parser.add_argument("--drain-timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (args.rate > 0 and args.duration > 0 and args.trigger > 0 and args.poll > 0):
        parser.error("--rate, --duration, --trigger and --poll must be positive")
    return args


def print_result(result: Result) -> None:
    print(
        f"  {result.format:<8} {result.readable:>6,}/{result.published:<7,}"
        f" {result.median_s:7.3f}s {result.p99_s:7.3f}s {result.max_s:7.3f}s"
        f"  {result.broker_cpu:6.0%} {result.ingest_cpu:6.0%} {result.bench_cpu:5.0%}"
        f"  {result.batches} of {result.mean_batch_s:.3f}s",
        flush=True,
    )
    if result.reader_error:
        print(f"    (the reader retried after: {result.reader_error})")


def main(argv: Sequence[str] | None = None, spark: Any = None) -> int:
    """Run the benchmark; with `spark` (a session the caller has), the ingest runs in this
    process on it (``--in-process`` with a session made here otherwise)."""
    args = parse_args(argv)
    if spark is not None:
        args.in_process = True
    if args.in_process and args.journal_service:
        raise SystemExit("--in-process reads the data directory: drop --journal-service")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="telemq-freshness-"))
    work.mkdir(parents=True, exist_ok=True)
    formats = FORMATS if args.format == "all" else (args.format,)
    results = []
    where = "journal service" if args.journal_service else "data directory"
    print(
        f"{args.rate:,.0f} msg/s for {args.duration:g}s, ingest --trigger {args.trigger:g}"
        f" ({where}{', in this process' if args.in_process else ''}),"
        f" a new reader every {args.poll:g}s; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(
        f"  {'format':<8} {'rows':>14} {'median':>8} {'p99':>8} {'max':>8}"
        f"  {'broker':>7} {'ingest':>7} {'bench':>6}  batches",
        flush=True,
    )
    owned = None
    if args.in_process and spark is None:
        from telemq.pipeline.spark import spark_session

        settings = dict(c.split("=", 1) for c in args.conf)
        log = work / "spark.log"
        spark = owned = spark_session(
            args.master, "telemq-bench-freshness", conf=settings, log_file=log
        )
    try:
        for table_format in formats:
            result = run_format(args, table_format, work / table_format, spark)
            results.append(result)
            print_result(result)
    finally:
        if owned is not None:
            owned.stop()
    print("  CPU: share of one core over the measured window (broker, ingest with its JVM")
    print("  and Python workers, this process's publisher and reader); goal: median <= 1 s,")
    print(f"  p99 <= 2 s; load average {os.getloadavg()[0]:.2f} at the end")
    if args.report:
        Path(args.report).write_text(json.dumps([asdict(r) for r in results], indent=2))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r.readable for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
