"""`telemq demo`: the whole product in about a minute, on this machine only.

1. a broker on the embedded default store (SQLite) in a fresh work directory, on loopback;
2. simulated sensors publishing JSON telemetry (QoS 1) for ``--duration`` seconds;
3. an MQ subscription with an SQL filter (``temp > 30``) registered with a RegSub command on
   ``SYSTEM.BROKER.CONTROL.QUEUE``, whose deliveries are printed as alerts; if the broker does
   not answer the command, the demo says so and the alerts come from the Spark replay only;
4. the ingest job (continuous, while the sensors publish) into the lake's journal table in the
   default table format (a Delta table; `table_format.DEFAULT_FORMAT`), the aggregate
   job (10 s windows, published back to the broker as retained messages), and the replay
   job evaluating the alert filter over the whole journal on Spark;
5. a summary: journal and lake row counts, the aggregates, the alerts, where it all is, and
   how to open the table with pandas, DuckDB and Spark.

It ends by itself. The work directory is kept (the path is printed) unless ``--cleanup``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import math
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..broker import BrokerConfig, ListenerConfig, run_broker
from ..broker.settings.config import StoreConfig, SysConfig

ALERT_FILTER = "temp > 30"
ALERT_QUEUE = "demo-alerts"
CONTROL_TOPIC = "SYSTEM.BROKER.CONTROL.QUEUE"
AGGREGATE_PREFIX = "telemq/aggregates"
ROOMS = ("lab", "office", "server-room", "warehouse")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="end-to-end demo: broker, sensors, filtered alerts, Spark jobs (about a minute)",
        description="Start a broker, simulated sensors and a filtered MQ subscription, run the"
        " Spark ingest, aggregate and replay jobs, and show the results. Needs PySpark 4 and"
        " Java 17+.",
    )
    demo.add_argument("--duration", type=float, default=20.0, help="seconds of sensor traffic")
    demo.add_argument("--sensors", type=int, default=8, help="number of simulated sensors")
    demo.add_argument("--rate", type=float, default=4.0, help="messages per second per sensor")
    demo.add_argument("--workdir", help="work directory (default: a new temporary directory)")
    demo.add_argument("--cleanup", action="store_true", help="delete the work directory at the end")
    demo.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    demo.add_argument("--seed", type=int, default=7, help="random seed of the sensors")
    demo.set_defaults(handler=run)


class BrokerThread:
    """A broker on its own event loop in a daemon thread."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="telemq-demo-broker", daemon=True)

    def start(self) -> int:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise RuntimeError(f"the broker did not start: {self._error}")
        if not self.port:
            raise RuntimeError("the broker did not start in 60 seconds")
        return self.port

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def started(broker: Any) -> None:
                self.port = broker.bound_ports[0]
                self._ready.set()

            await run_broker(self.config, self._stop, on_started=started)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def register_alerts(port: int, timeout: float = 3.0) -> Any | None:
    """RegSub ``sensors/#`` with the alert filter for queue `ALERT_QUEUE`.

    Returns the connected client of that queue (persistent session) when the broker answers
    ``ok``, else None (the broker does not implement MQ commands, or refused).
    """
    from ..client import MqttClient, MqttError

    client = MqttClient("127.0.0.1", port, ALERT_QUEUE, clean_session=False, timeout=10)
    try:
        client.connect()
        client.subscribe([(f"SYSTEM.BROKER.RESPONSE/{ALERT_QUEUE}", 1)])
        command = {
            "mqmd": {"MsgType": "request", "CorrelId": uuid.uuid4().hex[:16]},
            "psc": {"Command": "RegSub", "Topic": ["sensors/#"], "Filter": ALERT_FILTER},
        }
        client.publish(CONTROL_TOPIC, json.dumps(command).encode(), qos=1)
        client.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = client.receive(deadline - time.monotonic())
            if message is None:
                break
            if not message.topic.startswith("SYSTEM.BROKER.RESPONSE/"):
                continue
            try:
                answer = json.loads(message.payload)
            except ValueError:
                break
            completion = (answer.get("pscr") or {}).get("Completion")
            if completion == "ok":
                return client
            print(f"  the broker refused the RegSub: {message.payload.decode(errors='replace')}")
            break
    except MqttError as exc:
        print(f"  RegSub failed: {exc}")
    client.close()
    return None


class Alerts(threading.Thread):
    """Prints the deliveries of the alert subscription while the demo runs."""

    def __init__(self, client: Any, show: int = 8) -> None:
        super().__init__(name="telemq-demo-alerts", daemon=True)
        self.client = client
        self.show = show
        self.received: list[tuple[str, bytes]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                message = self.client.receive(0.5)
            except Exception:
                return
            if message is None or message.topic.startswith("SYSTEM.BROKER.RESPONSE/"):
                continue
            self.received.append((message.topic, message.payload))
            if len(self.received) <= self.show:
                print(f"  ALERT {message.topic}: {message.payload.decode(errors='replace')}")
            elif len(self.received) == self.show + 1:
                print("  (more alerts: counted, not printed)")

    def stop(self) -> None:
        self.done.set()
        self.join(5)
        self.client.close()


@dataclass(slots=True)
class Sensor:
    """One simulated sensor: its topic, its connection and its drifting readings."""

    name: str
    topic: str
    client: Any
    temp: float
    humidity: float
    battery: float = 100.0

    def reading(self, rng: random.Random) -> dict[str, object]:
        self.temp += rng.gauss(0, 0.6) + (25.0 - self.temp) * 0.05
        self.humidity = min(100.0, max(0.0, self.humidity + rng.gauss(0, 1)))
        self.battery = max(0.0, self.battery - 0.05)
        spike = rng.uniform(6, 10) if rng.random() < 0.06 else 0.0  # what the alerts catch
        return {
            "sensor": self.name,
            "temp": round(self.temp + spike, 2),
            "humidity": round(self.humidity, 1),
            "battery": round(self.battery, 1),
        }


def simulate_sensors(port: int, args: argparse.Namespace, done: threading.Event) -> int:
    """Publish JSON telemetry from `args.sensors` sensors for `args.duration` seconds."""
    from ..client import MqttClient

    rng = random.Random(args.seed)
    sensors: list[Sensor] = []
    sent = 0
    try:
        for i in range(args.sensors):
            client = MqttClient("127.0.0.1", port, f"sensor-{i:02d}", timeout=10)
            client.connect()
            room = ROOMS[i % len(ROOMS)]
            sensors.append(
                Sensor(
                    f"s{i:02d}",
                    f"sensors/{room}/s{i:02d}",
                    client,
                    rng.uniform(20, 27),
                    rng.uniform(30, 60),
                )
            )
        period = 1.0 / max(args.rate, 0.1)
        deadline = time.monotonic() + args.duration
        next_tick = time.monotonic()
        while time.monotonic() < deadline:
            for sensor in sensors:
                sensor.client.publish(sensor.topic, json.dumps(sensor.reading(rng)).encode(), 1)
                sent += 1
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
        for sensor in sensors:
            sensor.client.disconnect()
    finally:
        for sensor in sensors:
            sensor.client.close()
        done.set()
    return sent


def read_retained(port: int, prefix: str, timeout: float = 3.0) -> dict[str, Any]:
    """The retained messages under `prefix` (what a new subscriber gets at once)."""
    from ..client import MqttClient

    found: dict[str, Any] = {}
    with MqttClient("127.0.0.1", port, f"demo-reader-{uuid.uuid4().hex[:6]}") as client:
        client.subscribe([(f"{prefix}/#", 1)])
        while True:
            message = client.receive(timeout if not found else 0.5)
            if message is None:
                break
            found[message.topic] = json.loads(message.payload)
    return found


def reading_hints(table_format: str, table: Path) -> list[str]:
    """How to open the journal table with pandas, DuckDB and Spark (the demo's last lines)."""
    if table_format != "delta":
        return [f"read the lake with any Parquet reader, e.g. pandas.read_parquet('{table}')"]
    files = f"DeltaTable('{table}').file_uris()"
    return [
        "open the table (from deltalake import DeltaTable):",
        f"  pandas:  DeltaTable('{table}').to_pandas()",
        f'  DuckDB:  duckdb.sql(f"SELECT * FROM read_parquet({{{files}}},'
        ' hive_partitioning = true)")',
        f"  Spark:   spark.read.option('basePath', '{table}').parquet(*{files})",
    ]


def argument_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the demo's options, checked before anything starts."""
    if not (math.isfinite(args.duration) and args.duration > 0):
        return f"--duration: expected seconds > 0, got {args.duration:g}"
    if args.sensors < 1:
        return f"--sensors: expected 1 or more, got {args.sensors}"
    if not (math.isfinite(args.rate) and args.rate > 0):
        return f"--rate: expected messages per second > 0, got {args.rate:g}"
    if args.workdir and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        return f"--workdir {args.workdir}: not a directory"
    return None


def run(args: argparse.Namespace) -> int:
    error = argument_error(args)
    if error is not None:
        print(f"telemq: {error}", file=sys.stderr)
        return 2
    try:
        for module in ("pyarrow", "pyspark"):
            importlib.import_module(module)

        from ..pipeline.spark import JavaNotFoundError, check_java
    except ImportError as exc:
        print(
            f"telemq: the demo needs PySpark 4 and pyarrow ({exc}): pip install 'telemq[spark]'",
            file=sys.stderr,
        )
        return 2
    try:
        check_java()
    except JavaNotFoundError as exc:
        print(f"telemq: {exc}", file=sys.stderr)
        return 2
    return run_demo(args)


def _active_session() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def run_demo(args: argparse.Namespace, spark: Any = None) -> int:
    """The demo (see the module docstring); uses `spark` if given, else starts a session."""
    from ..pipeline.aggregate import run_aggregate
    from ..pipeline.ingest import run_ingest
    from ..pipeline.journal import read_bounds
    from ..pipeline.progress import Reporter
    from ..pipeline.replay import run_replay
    from ..pipeline.spark import spark_session
    from .pipeline import print_aggregates, print_matches

    started = time.monotonic()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="telemq-demo-"))
    data, lake = work / "data", work / "lake"
    report = Reporter(sys.stdout)
    print(f"telemq demo: work directory {work}")

    config = BrokerConfig(
        listeners=[ListenerConfig(host="127.0.0.1", port=0)],
        store=StoreConfig(kind="sqlite", data_dir=str(data), sync="normal"),
        sys=SysConfig(interval=0),
    )
    broker = BrokerThread(config)
    port = broker.start()
    report(f"broker listening on 127.0.0.1:{port}, store {data}")
    own_session = spark is None and _active_session() is None
    alerts: Alerts | None = None
    try:
        client = register_alerts(port)
        if client is not None:
            report(f"RegSub: queue {ALERT_QUEUE!r} subscribed to sensors/# WHERE {ALERT_FILTER}")
            alerts = Alerts(client)
            alerts.start()
        else:
            report(
                "RegSub: this broker does not answer MQ commands yet, so no live alerts;"
                f" the Spark replay below evaluates the same filter ({ALERT_FILTER})"
            )

        sensors_done = threading.Event()
        sent: list[int] = []
        sensor_thread = threading.Thread(
            target=lambda: sent.append(simulate_sensors(port, args, sensors_done)),
            name="telemq-demo-sensors",
            daemon=True,
        )
        sensor_thread.start()
        report(
            f"{args.sensors} sensors publishing JSON telemetry for {args.duration:g}s"
            f" (sensors/<room>/<id>, QoS 1)"
        )
        if spark is None:
            spark_log = work / "spark.log"
            report(f"starting Spark (local, UI off; its own messages go to {spark_log})...")
            spark = spark_session(args.master, "telemq-demo", log_file=spark_log)
        report("ingest: streaming the journal into the lake while the sensors publish")
        ingest = run_ingest(
            spark,
            data,
            lake,
            continuous=True,
            trigger_seconds=2.0,
            stop=sensors_done,
            progress=lambda m: report(f"  ingest {m}"),
        )
        sensor_thread.join()  # every publication was acknowledged, so journaled: the
        # ingest above processed all of them before returning
        report("aggregate: 10s windows per topic, latest published back as retained messages")
        aggregate = run_aggregate(
            spark,
            lake,
            "10s",
            publish_to=("127.0.0.1", port),
            topic_prefix=AGGREGATE_PREFIX,
            progress=lambda m: report(f"  aggregate: {m}"),
        )
        retained = read_retained(port, AGGREGATE_PREFIX)
        report(f"replay: sensors/# WHERE {ALERT_FILTER} over the whole journal, on Spark")
        replay = run_replay(spark, data, topics=["sensors/#"], filter=ALERT_FILTER, limit=5)
        time.sleep(1.0)  # let the last live alerts arrive
        if alerts is not None:
            alerts.stop()

        first, last = read_bounds(data)
        lake_stats = ingest.lake_stats
        print()
        print("== results ==")
        print(f"sensors published {sent[0] if sent else 0:,} messages")
        print(f"journal: {last - first + 1:,} rows (seq {first:,}..{last:,})")
        print(
            f"lake: {lake_stats.rows:,} rows in {lake_stats.files} Parquet file(s) of a"
            f" {ingest.table_format} table, {len(ingest.batches)} batch(es): {lake / 'journal'}"
        )
        print(
            f"aggregates: {aggregate.rows:,} rows (window 10s) for {len(aggregate.latest)}"
            f" topic(s): {aggregate.table}"
        )
        print_aggregates(aggregate.latest, aggregate.fields, 8)
        print(f"retained on the broker under {AGGREGATE_PREFIX}/: {len(retained)} topic(s)")
        print(f"alerts ({ALERT_FILTER}): {replay.matched:,} found by the Spark replay", end="")
        if alerts is not None:
            same = "same" if len(alerts.received) == replay.matched else "differs"
            print(f", {len(alerts.received):,} delivered live by the broker ({same})")
        else:
            print(" (live alerts need the broker's MQ commands)")
        print_matches(replay.preview)
        print()
        for line in reading_hints(ingest.table_format, lake / "journal"):
            print(line)
        print(f"done in {time.monotonic() - started:.0f}s")
    finally:
        if alerts is not None and alerts.is_alive():
            alerts.stop()
        if own_session and spark is not None:
            spark.stop()
        broker.stop()
        if args.cleanup:
            shutil.rmtree(work, ignore_errors=True)
    return 0
