"""Helpers for the pipeline tests: journals written through the store, live brokers, clients.

Journals are written with `SqliteStore` (the broker's own store code), so the source reads
exactly the file format the broker produces. Live brokers run in a thread of the test process
(`telemq.cli.demo.BrokerThread`, the demo's own runner) on a free loopback port.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.settings.config import StoreConfig, SysConfig
from telemq.cli.demo import BrokerThread
from telemq.client import MqttClient
from telemq.store import JournalRecord, SqliteStore, WriteBatch
from testsupport.process import BrokerProcess, free_port

TS0 = 1_732_233_600_000_000  # 2024-11-22T00:00:00Z in microseconds


@dataclass(frozen=True, slots=True)
class Pub:
    """One publication to journal; seq and ts are assigned on writing."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False
    client_id: str = "c1"
    user_id: str = ""
    sub_point: str = ""
    origin: str = "telemq"  # the broker it was made at; "": a row older than schema 6


def append_journal(
    data_dir: Path, pubs: Iterable[Pub], *, ts_step_us: int = 1_000, ts0: int = TS0
) -> list[JournalRecord]:
    """Append `pubs` to the journal of `data_dir` (created if needed), as the broker would."""
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(data_dir / "telemq.db", "off")
    try:
        seq = store.load().next_seq
        batch = WriteBatch()
        records = []
        for pub in pubs:
            record = JournalRecord(
                seq,
                ts0 + seq * ts_step_us,
                pub.topic,
                pub.sub_point,
                pub.qos,
                pub.retain,
                pub.payload,
                pub.client_id,
                pub.user_id,
                origin=pub.origin,
            )
            batch.append_journal(record)
            records.append(record)
            seq += 1
        store.commit(batch)
    finally:
        store.close()
    return records


def telemetry(count: int, *, topics: int = 5, seed: int = 1) -> list[Pub]:
    """`count` JSON telemetry publications over a few topics, with some odd payloads."""
    import random

    rng = random.Random(seed)
    pubs = []
    for i in range(count):
        topic = f"sensors/room{i % topics}/t"
        kind = i % 17
        if kind == 0:
            payload = b"not json"
        elif kind == 1:
            payload = json.dumps({"temp": str(rng.randint(20, 40))}).encode()  # a string
        elif kind == 2:
            payload = bytes([0xFF, 0x00, 0x10])  # not UTF-8
        elif kind == 3:
            payload = b""
        else:
            payload = json.dumps(
                {
                    "temp": round(rng.uniform(15, 40), 2),
                    "hum": rng.randint(20, 90),
                    "ok": i % 2 == 0,
                }
            ).encode()
        origin = ("telemq", "edge-1", "")[i % 3 if i % 5 == 0 else 0]  # "": before schema 6
        pubs.append(
            Pub(
                topic,
                payload,
                qos=i % 3,
                retain=i % 7 == 0,
                client_id=f"dev{i % 4}",
                origin=origin,
            )
        )
    return pubs


def journal_rows(records: Sequence[JournalRecord]) -> list[tuple[Any, ...]]:
    """Records as comparable tuples in the source's column order (ts in microseconds)."""
    return [
        (r.seq, r.ts_us, r.topic, r.sub_point, r.qos, r.retain, r.payload, r.client_id, r.user_id)
        for r in records
    ]


def frame_rows(rows: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Spark rows (or dicts) of the journal schema as the tuples `journal_rows` makes."""
    out = []
    for row in rows:
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        ts = d["ts"]
        micros = ts if isinstance(ts, int) else _micros(ts)
        out.append(
            (
                d["seq"],
                micros,
                d["topic"],
                d["sub_point"],
                d["qos"],
                d["retain"],
                bytes(d["payload"]),
                d["client_id"],
                d["user_id"],
            )
        )
    return sorted(out)


def _micros(ts: Any) -> int:
    """A Spark timestamp (naive, in the session time zone, or aware) in UTC microseconds."""
    import datetime as dt

    if ts.tzinfo is None:
        ts = ts.astimezone()  # naive values are local time of the session's zone
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    delta = ts - epoch
    return int((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def start_broker(data_dir: Path) -> BrokerThread:
    """A broker on a free loopback port with its SQLite store in `data_dir`."""
    config = BrokerConfig(
        listeners=[ListenerConfig(host="127.0.0.1", port=0)],
        store=StoreConfig(kind="sqlite", data_dir=str(data_dir), sync="normal"),
        sys=SysConfig(interval=0),
    )
    broker = BrokerThread(config)
    broker.start()
    return broker


def collect(client: MqttClient, count: int, timeout: float = 20.0) -> list[Any]:
    """Receive up to `count` publications, waiting at most `timeout` seconds in all."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = client.receive(max(0.05, deadline - time.monotonic()))
        if message is not None:
            got.append(message)
    return got


def drain(client: MqttClient, quiet: float = 1.0) -> list[Any]:
    """Receive until nothing arrives for `quiet` seconds."""
    got: list[Any] = []
    while True:
        message = client.receive(quiet)
        if message is None:
            return got
        got.append(message)


def command(client: MqttClient, psc: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send a JSON MQ command (request) and return the JSON reply (to the default topic)."""
    client.subscribe([(f"SYSTEM.BROKER.RESPONSE/{client.client_id}", 1)])
    correl = uuid.uuid4().hex[:16]
    body = {"mqmd": {"MsgType": "request", "CorrelId": correl}, "psc": psc}
    client.publish("SYSTEM.BROKER.CONTROL.QUEUE", json.dumps(body).encode(), 1)
    client.flush()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = client.receive(deadline - time.monotonic())
        if message is not None and message.topic.startswith("SYSTEM.BROKER.RESPONSE/"):
            reply: dict[str, Any] = json.loads(message.payload)
            return reply
    raise AssertionError(f"no reply to {psc}")


@contextlib.contextmanager
def journal_service(
    workdir: Path, pubs: Iterable[Pub] = (), *, config_text: str = "", **journal: Any
) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker subprocess serving the journal over HTTP: ``(broker, its URL)``.

    `pubs` are journaled before it starts (its data directory is ``workdir/"data"``), with
    `append_journal`'s `journal` keywords; it is stopped when the block ends.
    """
    http_port = free_port()
    broker = BrokerProcess(
        workdir,
        config_text=config_text + "\n[sys]\ninterval = 0\n",
        args=["--http-port", str(http_port)],
    )
    append_journal(broker.data_dir, pubs, **journal)
    broker.start()
    try:
        yield broker, f"http://127.0.0.1:{http_port}"
    finally:
        broker.finalize()


def read_lake_table(table_format: str, lake: Path, name: str) -> Any:
    """A table of the lake as a pyarrow Table, read by the format's own library."""
    if table_format == "delta":
        import deltalake

        return deltalake.DeltaTable(str(lake / name)).to_pyarrow_table()
    if table_format == "iceberg":
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(
            "telemq", type="sql", uri=f"sqlite:///{lake / '_iceberg' / 'catalog.db'}"
        )
        return catalog.load_table(f"telemq.{name}").scan().to_arrow()
    import pyarrow as pa
    import pyarrow.dataset as ds

    dataset = ds.dataset(lake / name, format="parquet", partitioning="hive")
    schemas = [ds.dataset(f, format="parquet").schema for f in dataset.files]
    return ds.dataset(dataset.files, schema=pa.unify_schemas(schemas)).to_table()


def run_stream(
    spark: Any, where: Path | str, checkpoint: Path, **options: object
) -> dict[int, list[Any]]:
    """Run the source to the end of the journal (Trigger.AvailableNow) with `options`; the
    rows of each micro-batch, by batch id."""
    from telemq.pipeline.source import stream_journal

    batches: dict[int, list[Any]] = {}

    def keep(frame: Any, batch_id: int) -> None:
        batches[batch_id] = frame.collect()

    query = (
        stream_journal(spark, str(where), options=options)
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return batches
