"""``telemq serve``: flags, TOML configuration, logging, signals and limits."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from telemq.broker.tuning import RESERVED_DESCRIPTORS

from .helpers import (
    HOST,
    MQTT31,
    PUBACK,
    BrokerProcess,
    ConnectionClosed,
    RawClient,
    ack_packet,
    free_port,
    raw_connected,
    unique,
    write_config,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

BrokerFactory = Callable[..., BrokerProcess]
RawFactory = Callable[..., RawClient]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemq", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
        check=False,
    )


def test_serve_help_lists_the_options() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    for option in (
        "--config",
        "--host",
        "--port",
        "--data-dir",
        "--store",
        "--sync",
        "--sys-interval",
        "--ready-file",
    ):
        assert option in result.stdout, option


def test_logs_listener_line_on_stderr(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    assert f"listening on {HOST}:{broker.port}" in broker.log_text()


def test_ready_file_names_the_ports_the_system_picked(broker_factory: BrokerFactory) -> None:
    """With port 0 the system picks the ports as the broker binds them; the ready file says
    which, and which process bound them, and goes away when the broker stops."""
    broker = broker_factory("--http-port", "0")  # and --port 0: BrokerProcess picks none
    assert broker.proc is not None
    report = json.loads(broker.ready_path.read_text(encoding="utf-8"))
    assert report["pid"] == broker.proc.pid
    assert report["listeners"] == [
        {"host": HOST, "ports": [broker.port], "sub_point": "", "tls": False}
    ]
    [http_port] = report["http"]
    log = broker.log_text()
    assert f"listening on {HOST}:{broker.port}" in log
    assert f"journal service on http://{HOST}:{http_port}" in log
    with raw_connected(broker.port) as client:
        assert client.is_open()
    assert broker.stop() == 0
    assert not broker.ready_path.exists()


def test_an_unwritable_ready_file_is_a_one_line_error(tmp_path: Path) -> None:
    ready = tmp_path / "no-such-dir" / "ready.json"
    args = ["serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    result = run_cli(*args, "--ready-file", str(ready), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "telemq: cannot write the ready file:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly_with_exit_code_0(
    broker_factory: BrokerFactory, raw_factory: RawFactory, sig: int
) -> None:
    broker = broker_factory()
    client = raw_factory(broker.port, connected=True)
    client.subscribe([(unique("s/"), 1)])
    assert broker.stop(sig) == 0
    assert client.wait_closed()
    with pytest.raises(OSError):
        RawClient(broker.port, timeout=2).close()


def test_data_dir_is_created_and_used(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = broker_factory(start=False)
    assert not broker.data_dir.exists()
    broker.start()
    assert broker.data_dir.is_dir()
    assert any(broker.data_dir.iterdir()), "the SQLite store keeps its files in the data dir"


def test_default_data_dir_is_telemq_data_in_cwd(broker_factory: BrokerFactory) -> None:
    """Without --data-dir the store goes to ./telemq-data."""
    broker = broker_factory(start=False, pass_port=False)
    broker.args = ["--host", HOST, "--port", "0"]
    broker.start()
    assert (broker.workdir / "telemq-data").is_dir()


def test_config_file_sets_listener_and_data_dir(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    port = free_port()
    data = tmp_path / "from-config"
    config = write_config(
        tmp_path / "telemq.toml",
        f"""
name = "test-broker"

[[listeners]]
host = "127.0.0.1"
port = {port}
sub_point = ""

[store]
kind = "sqlite"
data_dir = "{data.as_posix()}"
sync = "normal"

[journal]
enabled = true

[limits]
max_packet_size = 1048576
max_inflight = 100
max_queued_messages = 1000
max_connections = 0
connect_timeout = 10.0
retry_interval = 20.0

[sys]
interval = 10.0
""",
    )
    broker = broker_factory(config=config, pass_port=False, port=port)
    assert f"listening on 127.0.0.1:{port}" in broker.log_text()
    with raw_connected(port) as client:
        assert client.is_open()
    assert data.is_dir() and any(data.iterdir())


def test_flags_override_config_file(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    file_port = free_port()
    config = write_config(
        tmp_path / "telemq.toml",
        f'[[listeners]]\nhost = "127.0.0.1"\nport = {file_port}\n',
    )
    broker = broker_factory(config=config)  # passes --host/--port/--data-dir too
    assert broker.port != file_port
    assert f"listening on 127.0.0.1:{broker.port}" in broker.log_text()
    with raw_connected(broker.port) as client:
        assert client.is_open()
    with pytest.raises(OSError):
        RawClient(file_port, timeout=2).close()


def test_two_listeners(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    listeners = "".join(f'[[listeners]]\nhost = "127.0.0.1"\nport = {p}\n\n' for p in ports)
    config = write_config(
        tmp_path / "telemq.toml",
        listeners + f'[store]\ndata_dir = "{(tmp_path / "d").as_posix()}"\n',
    )
    broker = broker_factory(config=config, pass_port=False, port=ports[0], ready_ports=ports)
    for p in ports:
        assert f"listening on 127.0.0.1:{p}" in broker.log_text()
    topic = unique("two/")
    with raw_connected(ports[0]) as sub, raw_connected(ports[1]) as pub:
        sub.subscribe([(topic, 1)])
        pub.publish(topic, b"across listeners", qos=1)
        assert sub.collect(1)[0].payload == b"across listeners"


def test_memory_store_forgets_on_restart_sqlite_remembers(
    broker_factory: BrokerFactory, raw_factory: RawFactory
) -> None:
    topic = unique("mem/")
    for store, survives in (("memory", False), ("sqlite", True)):
        broker = broker_factory("--store", store)
        pub = raw_factory(broker.port, connected=True)
        pub.publish(topic, store.encode(), qos=1, retain=True)
        assert broker.stop() == 0
        broker.start()
        sub = raw_factory(broker.port, connected=True)
        sub.subscribe([(topic, 1)])
        pub = raw_factory(broker.port, connected=True)
        pub.publish(topic, b"sentinel", qos=1)
        got = [m.payload for m in sub.collect(2 if survives else 1)]
        assert got == ([store.encode(), b"sentinel"] if survives else [b"sentinel"]), store


@pytest.mark.parametrize("sync", ["full", "normal", "off"])
def test_sync_modes_work(broker_factory: BrokerFactory, raw_factory: RawFactory, sync: str) -> None:
    broker = broker_factory("--sync", sync)
    topic = unique("sync/")
    sub = raw_factory(broker.port, connected=True)
    sub.subscribe([(topic, 2)])
    pub = raw_factory(broker.port, connected=True)
    for qos in (0, 1, 2):
        pub.publish(topic, str(qos).encode(), qos=qos)
    assert [m.payload for m in sub.collect(3)] == [b"0", b"1", b"2"]


def test_journal_disabled_still_routes(
    broker_factory: BrokerFactory, raw_factory: RawFactory, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "nojournal.toml", "[journal]\nenabled = false\n")
    broker = broker_factory(config=config)
    topic = unique("nj/")
    sub = raw_factory(broker.port, connected=True)
    sub.subscribe([(topic, 1)])
    pub = raw_factory(broker.port, connected=True)
    pub.publish(topic, b"x", qos=1)
    assert sub.collect(1)[0].payload == b"x"


def test_max_connections(
    broker_factory: BrokerFactory, raw_factory: RawFactory, tmp_path: Path
) -> None:
    """max_connections = 2: a third client gets CONNACK 3 (server unavailable, as the README
    says) and its connection is closed; once one leaves, a new one gets in."""
    config = write_config(tmp_path / "maxconn.toml", "[limits]\nmax_connections = 2\n")
    broker = broker_factory(config=config)
    first = raw_factory(broker.port, connected=True)
    raw_factory(broker.port, connected=True)
    third = raw_factory(broker.port)
    ack = third.connect(unique("third"))
    assert ack.return_code == 3, ack
    assert third.wait_closed()
    first.disconnect()
    deadline = time.monotonic() + 10
    while True:
        try:
            with raw_connected(broker.port) as late:
                assert late.is_open()
            break
        except (AssertionError, ConnectionClosed, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_max_inflight_limits_unacked_deliveries(
    broker_factory: BrokerFactory, raw_factory: RawFactory, tmp_path: Path
) -> None:
    """max_inflight = 5: with nothing acknowledged, at most 5 QoS 1 messages are sent; each
    PUBACK lets the next one through, in order."""
    config = write_config(tmp_path / "inflight.toml", "[limits]\nmax_inflight = 5\n")
    broker = broker_factory(config=config)
    topic = unique("if/")
    sub = raw_factory(broker.port, connected=True)
    sub.subscribe([(topic, 1)])
    pub = raw_factory(broker.port, connected=True)
    for i in range(12):
        pub.publish(topic, str(i).encode(), qos=1)
    window = sub.collect(5, ack=False)
    assert [int(m.payload) for m in window] == [0, 1, 2, 3, 4]
    # Give the broker a moment to (wrongly) send a sixth one.
    assert sub.try_recv_packet(1.0) is None, "more than max_inflight messages in flight"
    received = [int(m.payload) for m in window]
    pending = [m.pid for m in window]
    while len(received) < 12:
        pid = pending.pop(0)
        assert pid is not None
        sub.send(ack_packet(PUBACK, pid))
        (msg,) = sub.collect(1, ack=False)
        received.append(int(msg.payload))
        pending.append(msg.pid)
        assert len(pending) <= 5
    assert received == list(range(12))


def test_retry_interval_resends_to_mqtt31_client(
    broker_factory: BrokerFactory, raw_factory: RawFactory, tmp_path: Path
) -> None:
    """MQTT 3.1 clients get unacknowledged QoS 1 messages again, DUP=1, after
    retry_interval seconds, on the same connection."""
    config = write_config(tmp_path / "retry.toml", "[limits]\nretry_interval = 1.0\n")
    broker = broker_factory(config=config)
    topic = unique("retry/")
    sub = raw_factory(broker.port, connected=True, version=MQTT31, client_id=unique("r31"))
    sub.subscribe([(topic, 1)])
    pub = raw_factory(broker.port, connected=True)
    pub.publish(topic, b"again", qos=1)
    first = sub.expect_publish()
    assert (first.payload, first.dup) == (b"again", False)
    again = sub.expect_publish(timeout=15)
    assert (again.payload, again.dup, again.pid) == (b"again", True, first.pid)
    assert again.pid is not None
    sub.send(ack_packet(PUBACK, again.pid))
    assert sub.is_open()


def test_port_in_use_fails_with_nonzero_exit(broker_factory: BrokerFactory) -> None:
    first = broker_factory()
    second = broker_factory(start=False, port=first.port)
    second.start(wait=False)
    assert second.proc is not None
    assert second.proc.wait(10) != 0
    assert second.log_text().strip()


def test_invalid_config_fails_with_nonzero_exit(tmp_path: Path) -> None:
    bad = write_config(tmp_path / "bad.toml", '[limits]\nmax_inflight = "many"\n')
    result = run_cli("serve", "--config", str(bad), "--port", str(free_port()), cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip()


def test_unparsable_config_fails_with_nonzero_exit(tmp_path: Path) -> None:
    bad = write_config(tmp_path / "bad.toml", "[limits\nthis is not toml")
    result = run_cli("serve", "--config", str(bad), "--port", str(free_port()), cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr


def test_a_second_broker_on_the_same_data_dir_is_refused(broker_factory: BrokerFactory) -> None:
    """Two brokers writing one store would refuse each other's writes: the second one does
    not start, and says why."""
    first = broker_factory()
    args = ["serve", "--port", str(free_port()), "--data-dir", str(first.data_dir)]
    result = run_cli(*args, cwd=first.workdir)
    assert result.returncode == 2, result.stderr
    assert "in use by another process" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    with raw_connected(first.port) as client:  # the first one carries on
        client.publish(unique("still/"), b"ok", qos=1)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("data dir is a file", "cannot start: cannot create data directory"),
        ("config is a directory", "configuration error: cannot read configuration file"),
        ("config is not UTF-8", "configuration error:"),
        ("nan in the config", "limits.connect_timeout: nan is not a number"),
        ("nan on the command line", "sys.interval: nan is not a number"),
    ],
)
def test_bad_paths_and_values_are_one_line_errors(tmp_path: Path, setup: str, message: str) -> None:
    args = ["serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "data")]
    if setup == "data dir is a file":
        (tmp_path / "afile").write_text("x")
        args[-1] = str(tmp_path / "afile")
    elif setup == "config is a directory":
        args += ["--config", str(tmp_path)]
    elif setup == "config is not UTF-8":
        (tmp_path / "bad.toml").write_bytes(b"\xff\xfe")
        args += ["--config", str(tmp_path / "bad.toml")]
    elif setup == "nan in the config":
        args += [
            "--config",
            str(write_config(tmp_path / "c.toml", "[limits]\nconnect_timeout = nan\n")),
        ]
    else:
        args += ["--sys-interval", "nan"]
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def _descriptor_table_size(status: str) -> int:
    """FDSize of a /proc/PID/status text: the entries of the process's descriptor table."""
    for line in status.splitlines():
        if line.startswith("FDSize:"):
            return int(line.split()[1])
    raise AssertionError("no FDSize in the status")


def test_serve_grows_its_descriptor_table_before_clients_come(
    broker_factory: BrokerFactory,
) -> None:
    """The table of a process with threads grows with a wait in the accept that needs it
    (docs/performance.md): `telemq serve` grows it at start to what its descriptor limit
    allows (at most `RESERVED_DESCRIPTORS`), so no connection burst waits for it."""
    broker = broker_factory()
    assert broker.proc is not None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # the broker inherits it
    wanted = (
        RESERVED_DESCRIPTORS if soft == resource.RLIM_INFINITY else min(soft, RESERVED_DESCRIPTORS)
    )
    status = Path(f"/proc/{broker.proc.pid}/status").read_text()
    assert _descriptor_table_size(status) >= wanted
    # A plain Python process with a thread keeps the small table it started with.
    plain = subprocess.run(
        [
            sys.executable,
            "-c",
            "import threading, time; threading.Thread(target=time.sleep, args=(0.2,)).start();"
            " print(open('/proc/self/status').read())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert wanted <= 64 or _descriptor_table_size(plain.stdout) < wanted
