"""Load and fairness, bounded and on loopback only.

* 10,000 idle connections held at once (the file-descriptor limit raised for the test process
  and, inherited, for the broker), and the broker still serves a new client;
* connection storms (2,000 connects in a burst, three times): memory after the third is not
  much above memory after the first;
* a slow consumer that never reads: the publisher and another subscriber carry on, the slow
  one's queue stays bounded and what it loses is counted in ``$SYS/broker/messages/dropped``;
* keep-alive: silent connections are closed and their wills published.

Memory is the broker's ``VmRSS`` from ``/proc``; the bounds are generous on purpose: this is
not a performance test. Nothing here asserts on wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testsupport.paho import sys_value

from .conftest import BrokerFactory
from .helpers import (
    HOST,
    PINGREQ_BYTES,
    PINGRESP,
    PUBACK,
    BrokerProcess,
    ConnectionClosed,
    RawClient,
    Will,
    ack_packet,
    connect_packet,
    parse_publish,
    publish_packet,
    raw_connected,
    unique,
    write_config,
)

pytestmark = [pytest.mark.interop]

IDLE_CONNECTIONS = 10_000
FD_HEADROOM = 1_000  # descriptors beyond the connections: files, pipes, listeners, probes
MAX_RSS_PER_CONNECTION = 64 * 1024  # bytes
STORM = 2_000
STORMS = 3
MAX_STORM_GROWTH = 16 * 1024 * 1024  # bytes between the first and the last storm
CONNACK_OK = b"\x20\x02\x00\x00"


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (``VmRSS`` in ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def open_files_limit(pid: int) -> int:
    """The soft ``Max open files`` limit of a process, from ``/proc/<pid>/limits``."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-files limit for process {pid}")


def broker_pid(broker: BrokerProcess) -> int:
    assert broker.proc is not None and broker.running
    return broker.proc.pid


@contextlib.contextmanager
def raised_fd_limit(needed: int) -> Iterator[int]:
    """Raise this process's soft RLIMIT_NOFILE to ``needed`` (within the hard limit) for the
    duration; child processes started meanwhile inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target < needed:
        pytest.fail(f"the hard open-files limit ({hard}) is below the {needed} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))
    try:
        yield target
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _read_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await loop.sock_recv(sock, n - len(data))
        if not chunk:
            raise ConnectionClosed("EOF")
        data += chunk
    return data


async def _open_connections(
    port: int, count: int, prefix: str, concurrency: int, *, disconnect: bool
) -> list[socket.socket]:
    """``count`` raw MQTT connections: TCP connect, CONNECT (clean, keep-alive 0), CONNACK 0.

    With ``disconnect`` each one sends DISCONNECT and closes at once (a storm); otherwise the
    sockets are returned open (they belong to the caller, not to the event loop)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> socket.socket | None:
        async with gate:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (HOST, port))
                await loop.sock_sendall(sock, connect_packet(f"{prefix}{i}", keepalive=0))
                connack = await asyncio.wait_for(_read_exactly(loop, sock, 4), 60)
                assert connack == CONNACK_OK, f"connection {i}: CONNACK {connack!r}"
                if disconnect:
                    await loop.sock_sendall(sock, b"\xe0\x00")
                    sock.close()
                    return None
            except BaseException:
                sock.close()
                raise
            return sock

    results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
    sockets = [r for r in results if isinstance(r, socket.socket)]
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        for sock in sockets:
            sock.close()
        raise AssertionError(f"{len(errors)} of {count} connections failed; first: {errors[0]!r}")
    return sockets


def open_connections(
    port: int, count: int, prefix: str, *, concurrency: int = 256, disconnect: bool = False
) -> list[socket.socket]:
    return asyncio.run(_open_connections(port, count, prefix, concurrency, disconnect=disconnect))


def assert_serves(port: int) -> None:
    """A new client connects and a QoS 1 publication reaches a subscriber."""
    topic = unique("load/rt/")
    with raw_connected(port) as sub, raw_connected(port) as pub:
        assert sub.subscribe([(topic, 1)]) == [1]
        pub.publish(topic, b"still serving", qos=1)
        assert [m.payload for m in sub.collect(1, timeout=30)] == [b"still serving"]
        pub.disconnect()
        sub.disconnect()


def ping(sock: socket.socket) -> bool:
    """PINGREQ on a held (non-blocking) connection; True on PINGRESP."""
    sock.setblocking(True)
    sock.settimeout(10)
    try:
        sock.sendall(PINGREQ_BYTES)
        return sock.recv(2) == bytes([PINGRESP << 4, 0])
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# Many connections
# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_ten_thousand_idle_connections_are_held(broker_factory: BrokerFactory) -> None:
    with raised_fd_limit(IDLE_CONNECTIONS + FD_HEADROOM) as limit:
        broker = broker_factory("--sys-interval", "1")
        pid = broker_pid(broker)
        # The broker inherited the raised limit.
        assert open_files_limit(pid) >= limit, Path(f"/proc/{pid}/limits").read_text()
        assert_serves(broker.port)
        before = rss_bytes(pid)
        held = open_connections(broker.port, IDLE_CONNECTIONS, "idle")
        try:
            assert len(held) == IDLE_CONNECTIONS
            after = rss_bytes(pid)
            per_connection = (after - before) / IDLE_CONNECTIONS
            print(
                f"\nbroker RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB with "
                f"{IDLE_CONNECTIONS} connections: {per_connection / 1024:.1f} KiB per connection"
            )
            assert_serves(broker.port)
            connected = sys_value(
                broker.port,
                "$SYS/broker/clients/connected",
                15,
                until=lambda v: int(v) >= IDLE_CONNECTIONS,
            )
            assert connected is not None and int(connected) >= IDLE_CONNECTIONS, connected
            # Held connections are alive: a sample answers PINGREQ.
            sample = held[:: IDLE_CONNECTIONS // 50]
            assert sum(ping(sock) for sock in sample) == len(sample)
            assert per_connection < MAX_RSS_PER_CONNECTION, per_connection
        finally:
            for sock in held:
                sock.close()
        # Everything closed: the broker notices and keeps serving.
        remaining = sys_value(
            broker.port, "$SYS/broker/clients/connected", 30, until=lambda v: int(v) <= 2
        )
        assert remaining is not None and int(remaining) <= 2, remaining
        assert_serves(broker.port)
        assert broker.stop() == 0


@pytest.mark.timeout(120)
def test_connection_storms_do_not_grow_memory(broker_factory: BrokerFactory) -> None:
    with raised_fd_limit(STORM + FD_HEADROOM):
        broker = broker_factory("--sys-interval", "1")
        pid = broker_pid(broker)
        assert_serves(broker.port)
        after_storm: list[int] = []
        for storm in range(STORMS):
            sockets = open_connections(
                broker.port, STORM, f"storm{storm}-", concurrency=STORM, disconnect=True
            )
            assert sockets == []
            idle = sys_value(
                broker.port, "$SYS/broker/clients/connected", 30, until=lambda v: int(v) <= 1
            )
            assert idle is not None and int(idle) <= 1, f"storm {storm}: {idle} clients connected"
            assert_serves(broker.port)
            after_storm.append(rss_bytes(pid))
        print(
            "\nbroker RSS after each storm of "
            f"{STORM} connects: {[round(r / 2**20, 1) for r in after_storm]} MiB"
        )
        growth = after_storm[-1] - after_storm[0]
        assert growth < MAX_STORM_GROWTH, after_storm
        assert broker.stop() == 0


# ---------------------------------------------------------------------------------------------
# Slow consumer
# ---------------------------------------------------------------------------------------------

SLOW_INFLIGHT = 20
SLOW_QUEUE = 200
SLOW_MESSAGES_PER_QOS = 1_500
SLOW_PAYLOAD = 4096
MAX_SLOW_GROWTH = 64 * 1024 * 1024  # bytes: kernel and transport buffers, the bounded queue


class SmallWindowClient(RawClient):
    """A RawClient whose socket has a small receive buffer, set before connecting (so the
    TCP window stays small): a consumer that stops reading is noticed quickly."""

    def __init__(self, port: int, receive_buffer: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(10)
        sock.connect((HOST, port))
        self.port = port
        self.sock = sock
        self._buf = bytearray()
        self._next_pid = 0


class Reader(threading.Thread):
    """A subscriber that reads (and acknowledges) everything until told to stop."""

    def __init__(self, client: RawClient) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.payloads: list[bytes] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                packet = self.client.try_recv_packet(0.2)
                if packet is None:
                    continue
                message = parse_publish(packet)
                if message.qos == 1:
                    assert message.pid is not None
                    self.client.send(ack_packet(PUBACK, message.pid))
                self.payloads.append(message.payload)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _payload(n: int) -> bytes:
    return f"{n:06d}:".encode().ljust(SLOW_PAYLOAD, b".")


@pytest.mark.timeout(120)
def test_slow_consumer_does_not_stall_others(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "limits.toml",
        f"[limits]\nmax_inflight = {SLOW_INFLIGHT}\nmax_queued_messages = {SLOW_QUEUE}\n",
    )
    broker = broker_factory("--sys-interval", "1", config=config)
    pid = broker_pid(broker)
    topic = unique("load/slow/")

    slow = SmallWindowClient(broker.port, 4096)
    fast = RawClient(broker.port)
    publisher = raw_connected(broker.port, unique("pub"))
    reader = Reader(fast)
    try:
        assert slow.connect(unique("slow"), keepalive=0).return_code == 0
        assert slow.subscribe([(topic, 1)]) == [1]
        assert fast.connect(unique("fast"), keepalive=0).return_code == 0
        assert fast.subscribe([(topic, 1)]) == [1]
        reader.start()
        before = rss_bytes(pid)

        # QoS 0 and QoS 1 interleaved; every QoS 1 PUBACK must arrive (the publisher is not
        # held back by the consumer that does not read).
        total = 2 * SLOW_MESSAGES_PER_QOS
        for n in range(total):
            publisher.publish(topic, _payload(n), qos=n % 2)
        publisher.send(publish_packet(topic, b"end", qos=1, pid=1))
        publisher.expect_ack(PUBACK, 1, timeout=30)

        # The reading subscriber gets everything, in order.
        assert wait_for(lambda: len(reader.payloads) >= total + 1, 60), len(reader.payloads)
        assert reader.error is None, reader.error
        assert reader.payloads == [*(_payload(n) for n in range(total)), b"end"]
        grown = rss_bytes(pid) - before
        print(f"\nbroker RSS grew by {grown / 2**20:.1f} MiB with a consumer that never reads")
        assert grown < MAX_SLOW_GROWTH, grown

        # Now the slow consumer reads what the broker kept for it: at most its in-flight
        # window plus its queue of QoS 1, and the QoS 0 sent before its socket filled up.
        kept = drain(slow)
        kept_q1 = [n for n, qos in kept if qos == 1 and n < total]
        kept_q0 = [n for n, qos in kept if qos == 0]
        print(f"slow consumer kept {len(kept_q1)} QoS 1 and {len(kept_q0)} QoS 0 messages")
        assert len(kept_q1) == SLOW_INFLIGHT + SLOW_QUEUE, kept_q1
        assert kept_q1 == sorted(kept_q1) and kept_q0 == sorted(kept_q0)
        # Every publication the slow consumer did not get was dropped, the final QoS 1 "end"
        # (numbered ``total``) included.
        dropped = (total + 1) - len(kept)
        assert len(kept_q0) < SLOW_MESSAGES_PER_QOS, "the consumer's socket never filled up"
        counted = sys_value(
            broker.port, "$SYS/broker/messages/dropped", 15, until=lambda v: int(v) >= dropped
        )
        assert counted is not None and int(counted) == dropped, (counted, dropped)
    finally:
        reader.stop.set()
        reader.join(10)
        for client in (slow, fast, publisher):
            client.close()


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def drain(client: RawClient, quiet: float = 2.0) -> list[tuple[int, int]]:
    """Read (and acknowledge) until nothing arrives for ``quiet`` seconds; returns the
    (message number, QoS) of every publication (``end`` numbered one past the last)."""
    got: list[tuple[int, int]] = []
    while True:
        packet = client.try_recv_packet(quiet)
        if packet is None:
            return got
        message = parse_publish(packet)
        if message.qos == 1:
            assert message.pid is not None
            client.send(ack_packet(PUBACK, message.pid))
        number = (
            2 * SLOW_MESSAGES_PER_QOS if message.payload == b"end" else int(message.payload[:6])
        )
        got.append((number, message.qos))


# ---------------------------------------------------------------------------------------------
# Keep-alive
# ---------------------------------------------------------------------------------------------

SILENT_CLIENTS = 10
KEEPALIVE = 2


@pytest.mark.timeout(60)
def test_keepalive_expiry_closes_silent_connections_and_publishes_their_wills(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    prefix = unique("load/ka/")
    watcher = raw_connected(broker.port, keepalive=0)
    assert watcher.subscribe([(f"{prefix}/#", 1)]) == [1]
    silent = [
        raw_connected(
            broker.port,
            unique("silent"),
            keepalive=KEEPALIVE,
            will=Will(f"{prefix}/will/{i}", f"gone {i}".encode(), qos=1),
        )
        for i in range(SILENT_CLIENTS)
    ]
    # A client with the same keep-alive that does ping stays connected throughout.
    pinger = raw_connected(
        broker.port,
        unique("pinger"),
        keepalive=KEEPALIVE,
        will=Will(f"{prefix}/will/pinger", b"pinger gone", qos=1),
    )
    started = time.monotonic()
    try:
        closed_after: list[float] = []
        open_ones = list(silent)
        deadline = started + 10 * KEEPALIVE
        while open_ones and time.monotonic() < deadline:
            assert pinger.is_open()  # a PINGREQ round trip: resets its keep-alive
            for client in list(open_ones):
                try:
                    client.recv_packet(0.05)
                except ConnectionClosed:
                    closed_after.append(time.monotonic() - started)
                    open_ones.remove(client)
                except TimeoutError:
                    pass
            time.sleep(KEEPALIVE / 4)
        print(f"\nsilent connections closed after {sorted(round(t, 2) for t in closed_after)} s")
        assert open_ones == [], f"{len(open_ones)} silent connections still open"
        wills = watcher.collect(SILENT_CLIENTS, timeout=10)
        assert sorted(m.topic for m in wills) == sorted(
            f"{prefix}/will/{i}" for i in range(SILENT_CLIENTS)
        )
        assert all(m.payload == f"gone {m.topic.rsplit('/', 1)[1]}".encode() for m in wills)
        assert pinger.is_open()
        # The pinger ends with DISCONNECT: no will for it.
        pinger.disconnect()
        with raw_connected(broker.port) as pub:
            pub.publish(f"{prefix}/end", b"end", qos=1)
            pub.disconnect()
        assert [m.payload for m in watcher.collect(1)] == [b"end"]
    finally:
        for client in [*silent, pinger, watcher]:
            client.close()
