"""A broker on the PostgreSQL store, as an operator runs it: ``python -m telemq serve``.

- Crash: paho publishers send QoS 1 and QoS 2 messages to a persistent subscriber's
  subscriptions while the broker is SIGKILLed and restarted; every message the publisher had
  acknowledged (PUBACK, PUBCOMP) reaches the subscriber after one more kill, and each QoS 2
  message exactly once, in the subscriber's deliveries and in the journal.
- A second broker on the same database is refused at start, naming the first.
- Bad input (a DSN libpq cannot parse, no password, a server that refuses the connection,
  a database of a newer schema, a missing dsn): ``telemq serve`` prints one line naming the
  problem and exits 2.
- The journal service reads the database (bounds and ranges over HTTP), concurrent readers
  sharing its pool of connections.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from telemq.store.postgres import PostgresStore
from telemq.store.postgres_reader import POOL_SIZE, PostgresJournalReader
from telemq.store.postgres_schema import SCHEMA_VERSION
from testsupport.paho import PahoClient
from testsupport.postgres import PostgresServer
from testsupport.process import HOST, BrokerProcess, free_port, unique, wait_until

pytestmark = [pytest.mark.interop]

N = 400  # messages, QoS 1 and QoS 2 alternately
DEADLINE = 90.0


@pytest.fixture
def no_pgpass(tmp_path: Path) -> Iterator[None]:
    """No password from the environment: only what the test's configuration gives."""
    saved = {key: os.environ.get(key) for key in ("PGPASSWORD", "PGPASSFILE")}
    os.environ.pop("PGPASSWORD", None)
    os.environ["PGPASSFILE"] = str(tmp_path / "no.pgpass")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def store_config(server: PostgresServer, dsn: str, tmp_path: Path, extra: str = "") -> str:
    """A [store] table for the database `dsn` names, its password in a file."""
    secret = tmp_path / "pg.password"
    secret.write_text(server.password + "\n", encoding="utf-8")
    plain = dsn.replace(f" password={server.password}", "")
    return (
        f'{extra}\n[store]\nkind = "postgres"\ndsn = "{plain}"\n'
        f'password_file = "{secret}"\nsync = "full"\n'
    )


@pytest.fixture
def broker(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path, no_pgpass: None
) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "broker", config_text=store_config(postgres_server, postgres_dsn, tmp_path)
    )
    process.start()
    try:
        yield process
    finally:
        process.finalize()


def test_nothing_acknowledged_is_lost_across_sigkill(
    broker: BrokerProcess, postgres_dsn: str
) -> None:
    subscriber = PahoClient(broker.port, "pg-subscriber", clean=False)
    subscriber.connect()
    assert subscriber.subscribe([("pg/q1", 1), ("pg/q2", 2)]) == [1, 2]
    subscriber.disconnect()  # its session keeps the subscriptions: deliveries queue in the store

    publisher = paho.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id="pg-publisher",
        clean_session=False,
        reconnect_on_failure=True,
    )
    publisher.max_inflight_messages_set(20)
    publisher.reconnect_delay_set(0.05, 0.5)
    connected = threading.Event()
    connects: list[object] = []

    def on_connect(*args: object) -> None:
        connects.append(args)
        connected.set()

    publisher.on_connect = on_connect
    publisher.connect(HOST, broker.port, keepalive=30)
    publisher.loop_start()
    try:
        assert connected.wait(10)
        sent = []
        for i in range(N):
            qos = 1 + i % 2
            payload = f"q{qos}:{i}"
            sent.append((payload, qos, publisher.publish(f"pg/q{qos}", payload, qos=qos)))

        def acknowledged() -> int:
            return sum(info.is_published() for _, _, info in sent)

        for share in (N // 4, N // 2):  # kill mid-stream, twice
            assert wait_until(lambda share=share: acknowledged() >= share, DEADLINE)
            broker.kill()
            broker.start()
        assert wait_until(lambda: acknowledged() == N, DEADLINE), f"{acknowledged()} of {N}"
        # The publisher was cut off by both kills. Its acknowledgements may all have come
        # before the second kill: then it reconnects after the last of them, not before.
        assert wait_until(lambda: len(connects) >= 3, DEADLINE) and len(connects) == 3
    finally:
        publisher.loop_stop()
        publisher.disconnect()
    broker.kill()  # everything is acknowledged: it must all be in the database
    broker.start()

    subscriber = PahoClient(broker.port, "pg-subscriber", clean=False)
    assert subscriber.connect() is True  # the session survived three kills
    expected = {payload for payload, _, _ in sent}

    def payloads() -> set[str]:
        return {m.payload.decode() for m in subscriber.received()}

    assert wait_until(lambda: payloads() >= expected, DEADLINE), sorted(expected - payloads())
    time.sleep(0.5)  # a duplicate would arrive now
    counts = Counter(m.payload.decode() for m in subscriber.received())
    assert [p for p, n in counts.items() if p.startswith("q2:") and n > 1] == []
    subscriber.disconnect()

    with PostgresJournalReader(postgres_dsn) as reader:
        first, last = reader.bounds()
        journaled = Counter(row[6].decode() for row in reader.rows(first, last))
    assert set(journaled) >= expected
    assert [p for p, n in journaled.items() if p.startswith("q2:") and n > 1] == []


def serve(config: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemq", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line naming the problem of a broker that would not start."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("telemq:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_second_broker_on_the_same_database_is_refused(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    assert broker.config is not None
    line = refusal(serve(broker.config))
    assert line.startswith("telemq: cannot start: the store is in use by another broker")
    assert "application 'telemq (broker telemq)' from 127.0.0.1" in line
    assert broker.running  # the first one goes on


def test_bad_store_settings_are_one_line_and_exit_2(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path, no_pgpass: None
) -> None:
    plain = postgres_dsn.replace(f" password={postgres_server.password}", "")
    secret = tmp_path / "pg.password"
    secret.write_text(postgres_server.password + "\n", encoding="utf-8")
    refused = f"host={HOST} port={free_port()} user=x dbname=x"
    cases = [
        (f'dsn = "this is not a dsn"\npassword_file = "{secret}"', "dsn is not valid"),
        (f'dsn = "{plain}"', "fe_sendauth: no password supplied"),
        (f'dsn = "{plain}"\npassword_file = "{tmp_path / "nope"}"', "cannot read"),
        (f'dsn = "{refused}"', "Connection refused"),
        ('dsn = ""', "store.dsn: the postgres store needs one"),
    ]
    for index, (settings, words) in enumerate(cases):
        config = tmp_path / f"bad{index}.toml"
        config.write_text(f'[store]\nkind = "postgres"\n{settings}\n', encoding="utf-8")
        line = refusal(serve(config))
        assert words in line, (settings, line)
        assert postgres_server.password not in line


def test_a_database_of_a_newer_schema_is_refused(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path, no_pgpass: None
) -> None:
    store = PostgresStore(postgres_dsn)
    assert store._conn is not None
    store._conn.execute("UPDATE telemq_schema SET version = %s", (SCHEMA_VERSION + 1,))
    store.close()
    config = tmp_path / "newer.toml"
    config.write_text(store_config(postgres_server, postgres_dsn, tmp_path), encoding="utf-8")
    line = refusal(serve(config))
    assert f"schema version {SCHEMA_VERSION + 1}, newer than this telemq" in line


def test_the_journal_service_reads_the_database(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path, no_pgpass: None
) -> None:
    """Bounds and ranges over HTTP, from concurrent readers that share the journal
    service's pool of connections (no connection per request)."""
    http = free_port()
    extra = f'allow_anonymous = true\n[[http]]\nhost = "{HOST}"\nport = {http}\n'
    process = BrokerProcess(
        tmp_path / "broker",
        config_text=store_config(postgres_server, postgres_dsn, tmp_path, extra),
    )
    process.start()
    try:
        client = PahoClient(process.port, unique("pub"))
        client.connect()
        for i in range(5):
            client.publish("pg/journal", f"m{i}", qos=1)
        client.disconnect()
        with urllib.request.urlopen(f"http://{HOST}:{http}/journal/v1/bounds", timeout=10) as r:
            bounds = json.loads(r.read())
        assert bounds["first"] == 1 and bounds["last"] >= 5
        readers, requests = 8, 12
        with ThreadPoolExecutor(readers) as pool:
            answers = list(pool.map(lambda i: journal_payloads(http, i), range(readers * requests)))
        assert all(answer == [f"m{i}" for i in range(5)] for answer in answers), answers[:3]
        backends = postgres_server.admin(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            (postgres_dsn.split("dbname=")[1].split()[0], "telemq journal reader"),
        )[0][0]
        assert 1 <= backends <= POOL_SIZE  # kept open, and shared by the 96 requests
    finally:
        process.finalize()


def journal_payloads(http: int, index: int) -> list[str]:
    """Request `index` of the concurrent readers: the payloads on ``pg/journal`` (a range),
    or, one request in two, after the bounds."""
    import pyarrow as pa

    base = f"http://{HOST}:{http}/journal/v1"
    last = 5
    if index % 2:
        with urllib.request.urlopen(f"{base}/bounds?topic=pg/%23", timeout=30) as answer:
            last = json.loads(answer.read())["last"]
    url = f"{base}/range?from=1&to={last}&topic=pg/journal"
    with urllib.request.urlopen(url, timeout=30) as answer:
        table = pa.ipc.open_stream(answer.read()).read_all()
    return [bytes(p).decode() for p in table.column("payload").to_pylist()]
