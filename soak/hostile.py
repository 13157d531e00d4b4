#!/usr/bin/env python3
"""Hostile clients: each attack of docs/security.md against a live broker, and a sentinel.

Theory of operation. One telemq broker (SQLite store, users `alice` and `bob` with an ACL,
default limits) runs on 127.0.0.1 on a data directory of its own. Each attack runs in turn,
with raw MQTT over sockets (packets built with telemq's own encoder, or malformed on
purpose), and checks its expected outcome: the refusal the protocol gives, the session left
alone, the connection closed. Meanwhile a **sentinel** client, an ordinary connection, sends
PINGREQ every 10 ms and times each PINGRESP: how long another client waits while the attack
runs.

Then the **floods**, each on a fresh broker of its own: one client sends bursts of 1,000
packets, one burst every 20 ms without waiting for the broker (QoS 0, QoS 1 and retained
QoS 0 publications, SUBSCRIBE/UNSUBSCRIBE pairs of a persistent session), or sends back to
back, as fast as the broker reads (bursts of 1,000 QoS 0 publications of 1 KiB, or of 3,000
retained ones), or opens connections with wills and drops them, 100 every 20 ms. A
**bystander**, another ordinary client, publishes QoS 0 every 2 ms to a topic it subscribes
to and times each round trip until the broker has answered the whole flood; the report
gives its p50, p99 and slowest
round trip, the flood's own rate (what it made per second, from its first burst to the
broker's last answer), and how often the broker held back the flooder: reads it left for a
later turn of the event loop, pauses until a commit ended (`$SYS/broker/load/reads held`,
`$SYS/broker/store/pauses`; "-" for a broker without them).

``python3 soak/hostile.py [--bound-ms 100] [--attack NAME ...] [--bursts 50] [--list]``

The exit code is 0 when every attack had its expected outcome and the sentinel's slowest
answer during each stayed under `--bound-ms`, and every flood was answered in full with the
bystander's p99 under `--bound-ms`; 1 otherwise; 2 for a bad argument. `--attack` names an
attack or a flood (repeat it for more); without it, all run. The test suite
(tests/security/test_hostile_clients.py) runs the same attacks and floods (three bursts
each) and checks their outcomes and that the sentinel and the bystander were answered, but
asserts no times: the bound is this command's, on a machine that is not running anything
else.
"""

from __future__ import annotations

import argparse
import json
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from telemq.broker.security.passwords import hash_password
from telemq.protocol import Connect, Publish, Subscribe, Unsubscribe, Will, encode
from telemq.protocol.codec import Decoder
from telemq.protocol.packets import ConnAck, Packet, PingResp, PubAck, SubAck

PASSWORDS = {"alice": "alice-pw-Hz7", "bob": "bob-pw-Qm3"}
CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
RESPONSE = "SYSTEM.BROKER.RESPONSE/"
FAILURE = 0x80


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def config_text(port: int) -> str:
    lines = [
        'name = "QM.HOSTILE"',
        "[sys]",
        "interval = 0.5",
        "[limits]",
        f"max_packet_size = {2 * 1024 * 1024}",
        "[[listeners]]",
        'host = "127.0.0.1"',
        f"port = {port}",
    ]
    for name, password in PASSWORDS.items():
        encoded = hash_password(password, iterations=1000)
        lines += ["[[users]]", f'name = "{name}"', f'password_hash = "{encoded}"']
    rules = [
        ("*", "command", CONTROL_QUEUE),
        ("*", "subscribe", RESPONSE + "%c"),
        ("*", "all", "open/#"),
        ("*", "all", "r/#"),
        ("*", "all", "nomatch/#"),
        ("*", "all", "deep/#"),
        ("*", "all", "names/#"),
        ("*", "all", "h"),
        ("*", "all", "flood/#"),
        ("alice", "all", "alice/#"),
        ("alice", "subscribe", "$SYS/#"),
    ]
    for user, action, topic in rules:
        lines += ["[[acl]]", f'user = "{user}"', f'action = "{action}"', f'topic = "{topic}"']
    return "\n".join(lines) + "\n"


class Broker:
    """`python3 -m telemq serve` on a port and data directory of its own."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.config = workdir / "telemq.toml"
        self.config.write_text(config_text(self.port), encoding="utf-8")
        self.log = workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "telemq", "serve", "--config", str(self.config)),
                    *("--data-dir", str(self.workdir / "data"), "--log-level", "info"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        raise RuntimeError("the broker did not start")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


class Raw:
    """A raw MQTT connection: send packets or bytes, read decoded packets."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), 10)
        self.decoder = Decoder()
        self.pending: list[Packet] = []

    def send(self, data: bytes | Packet) -> None:
        self.sock.sendall(data if isinstance(data, bytes) else encode(data))

    def next(self, timeout: float = 20.0) -> Packet:
        deadline = time.monotonic() + timeout
        while not self.pending:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the broker")
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    def closed(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection within `timeout`."""
        try:
            while True:
                self.next(timeout)
        except ConnectionError:
            return True
        except (TimeoutError, OSError):
            return False

    def connect(
        self, client_id: str, user: str | None = None, clean: bool = True, password: bytes = b""
    ) -> int:
        secret = password or (PASSWORDS[user].encode() if user else None)
        self.send(Connect(client_id, clean_session=clean, username=user, password=secret))
        ack = self.next()
        assert isinstance(ack, ConnAck), ack
        return ack.return_code

    def close(self) -> None:
        self.sock.close()


def connected(port: int, client_id: str, user: str = "alice", clean: bool = True) -> Raw:
    raw = Raw(port)
    assert raw.connect(client_id, user, clean) == 0
    return raw


def subscribe(raw: Raw, filters: list[str], qos: int = 0, packet_id: int = 1) -> list[int]:
    raw.send(Subscribe(packet_id, [(f, qos) for f in filters]))
    while True:
        packet = raw.next(60.0)
        if isinstance(packet, SubAck):
            return list(packet.return_codes)


def command(raw: Raw, client_id: str, psc: dict[str, object]) -> dict[str, object]:
    """An MQ command (JSON) and its pscr; the client is subscribed to its response topic."""
    raw.send(Publish(CONTROL_QUEUE, json.dumps({"psc": psc}).encode(), 0))
    while True:
        packet = raw.next(60.0)
        if isinstance(packet, Publish) and packet.topic == RESPONSE + client_id:
            pscr: dict[str, object] = json.loads(packet.payload)["pscr"]
            return pscr


def commander(port: int, client_id: str, user: str) -> Raw:
    raw = connected(port, client_id, user)
    assert subscribe(raw, [RESPONSE + client_id]) == [0]
    return raw


# -- the sentinel ----------------------------------------------------------------------


@dataclass
class Sentinel:
    """PINGREQ every `interval` seconds on an ordinary connection; times each answer."""

    port: int
    interval: float = 0.01
    latencies: list[float] = field(default_factory=list)
    failure: str = ""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sentinel:
        self.raw = connected(self.port, "sentinel", "alice")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.raw.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                self.raw.send(b"\xc0\x00")
                packet = self.raw.next(30.0)
            except (OSError, ConnectionError) as error:
                self.failure = f"the sentinel lost its connection: {error!r}"
                return
            if not isinstance(packet, PingResp):
                self.failure = f"the sentinel got {packet!r}"
                return
            self.latencies.append(time.perf_counter() - start)
            self._stop.wait(self.interval)

    @property
    def slowest(self) -> float:
        return max(self.latencies, default=0.0)


# -- the attacks -----------------------------------------------------------------------
# Each takes the broker and raises AssertionError when the broker did not answer as
# docs/security.md says. Preparation that is not the attack runs before the sentinel.


@dataclass
class Attack:
    name: str
    summary: str
    run: Callable[[Broker], None]
    prepare: Callable[[Broker], None] | None = None


def prepare_retained(broker: Broker) -> None:
    raw = connected(broker.port, "retainer")
    for n in range(50_000):
        raw.send(Publish(f"r/{n % 1000:03d}/{n:05d}", b"kept", 0, retain=True))
    raw.send(Publish("open/done", b"", 1, packet_id=1))  # PUBACK: all of it was read
    while not isinstance(raw.next(60.0), PubAck):
        pass
    raw.close()


def wildcard_over_retained(broker: Broker) -> None:
    """50,000 retained messages; one SUBSCRIBE of 1,000 filters matching nothing, then one
    matching all 50,000 (delivered in slices)."""
    raw = connected(broker.port, "wildcards")
    codes = subscribe(raw, [f"nomatch/{i}/+" for i in range(1000)])
    assert codes == [0] * 1000
    assert subscribe(raw, ["r/#"], packet_id=2) == [0]
    got = 0
    while got < 50_000:
        if isinstance(raw.next(60.0), Publish):
            got += 1
    raw.close()


def filter_flood(broker: Broker) -> None:
    """The issue's 65 KB filters (refused 3150), a user's whole filter budget, then a 60 KB
    publication that reaches all of them."""
    raw = commander(broker.port, "filters", "bob")
    huge = " OR ".join(f"s LIKE '%{n:05d}%'" for n in range(3004))
    for _ in range(100):
        pscr = command(raw, "filters", {"Command": "RegSub", "Topic": ["h"], "Filter": huge})
        assert pscr["Completion"] == "error", pscr
    for n in range(64):
        text = " OR ".join(f"s LIKE '%{n:02d}{k:03d}%'" for k in range(127))
        psc = {"Command": "RegSub", "Topic": ["h"], "Filter": text, "QName": f"bobq{n}"}
        assert command(raw, "filters", psc)["Completion"] == "ok"
    raw.send(Publish("h", json.dumps({"s": "x" * 60_000}).encode(), 1, packet_id=7))
    while not isinstance(raw.next(60.0), PubAck):
        pass
    raw.close()


def deep_topics(broker: Broker) -> None:
    """One 983 KB SUBSCRIBE of 15 filters of 65,535 levels, in a persistent session; a
    PUBLISH 5,000 levels deep."""
    raw = connected(broker.port, "deep", clean=False)
    deep = "/" * 65534  # 65,535 empty levels: the longest filter MQTT can carry
    assert subscribe(raw, [deep] * 15) == [FAILURE] * 15
    raw.send(Publish("deep/" + "/".join(["a"] * 5000), b"x", 0))
    assert raw.closed(), "a PUBLISH beyond the level limit must close the connection"


def subscription_flood(broker: Broker) -> None:
    """100,000 subscriptions asked by one client: granted up to its quota."""
    raw = connected(broker.port, "many")
    granted = 0
    for packet_id in range(1, 101):
        first = (packet_id - 1) * 1000
        codes = subscribe(raw, [f"open/s/{n}" for n in range(first, first + 1000)], 0, packet_id)
        granted += sum(1 for code in codes if code != FAILURE)
    assert granted == 10_000, granted
    raw.close()


def topic_name_flood(broker: Broker) -> None:
    """1,000 distinct 64 KB topic names, routed to a subscriber that does not read; the
    routing caches keep at most their bound of topic names."""
    reader = connected(broker.port, "names")
    assert subscribe(reader, ["names/#"]) == [0]
    raw = connected(broker.port, "namer")
    tail = "t" * 65_000
    for n in range(1000):
        raw.send(Publish(f"names/{n:04d}/{tail}", b"", 1, packet_id=n % 60000 + 1))
        assert isinstance(raw.next(60.0), PubAck)
    reader.close()
    cached = "$SYS/broker/topic cache/bytes"
    assert subscribe(raw, [cached], packet_id=2) == [0], "$SYS refused"
    while True:  # the retained value, then one per $SYS interval: take a fresh one
        packet = raw.next(10.0)
        if isinstance(packet, Publish) and packet.topic == cached and not packet.retain:
            break
    assert 0 < int(packet.payload) <= 3 * 16 * 1024 * 1024, packet.payload
    raw.close()


def users_apart(broker: Broker) -> None:
    """bob with alice's client id, ListSubs of alice's subscriptions, RegSub on her queue."""
    victim = connected(broker.port, "alice-device", "alice", clean=False)
    assert subscribe(victim, ["alice/secret"], 1) == [1]
    for clean in (False, True):
        thief = Raw(broker.port)
        assert thief.connect("alice-device", "bob", clean) == 5
        thief.close()
    raw = commander(broker.port, "bob-snoop", "bob")
    pscr = command(raw, "bob-snoop", {"Command": "ListSubs"})
    listed = pscr.get("Subscriptions", [])
    assert isinstance(listed, list)
    assert not [s for s in listed if "alice-device" in json.dumps(s)], listed
    psc = {"Command": "RegSub", "Topic": ["open/x"], "QName": "alice-device"}
    pscr = command(raw, "bob-snoop", psc)
    assert pscr["Completion"] == "error", pscr
    victim.send(b"\xc0\x00")
    assert isinstance(victim.next(), PingResp), "alice's connection was disturbed"
    victim.close()
    raw.close()


def small_ones(broker: Broker) -> None:
    """A password with a trailing NUL; a PUBLISH trickled one byte at a time (keep-alive
    1 s); malformed packets. Each ends only its own connection."""
    raw = Raw(broker.port)
    assert raw.connect("nul", "alice", password=PASSWORDS["alice"].encode() + b"\0") == 4
    raw.close()
    trickler = Raw(broker.port)
    trickler.send(Connect("trickle", keepalive=1, username="alice", password=b"alice-pw-Hz7"))
    assert isinstance(trickler.next(), ConnAck)
    frame = encode(Publish("open/trickle", b"x" * 100, 0))
    start = time.monotonic()
    closed = False
    for byte in frame:
        try:
            trickler.send(bytes([byte]))
        except OSError:
            closed = True
            break
        time.sleep(0.2)
        if time.monotonic() - start > 4:
            break
    assert closed or trickler.closed(3.0), "a trickling client must hit the keep-alive"
    # A reserved packet type; a remaining length of five bytes; a PUBLISH before CONNECT.
    for garbage in (b"\x00\x00", b"\x10\xff\xff\xff\xff\x01", b"\x30\x03\x00\x01a"):
        bad = Raw(broker.port)
        bad.send(garbage)
        assert bad.closed(), garbage
        bad.close()


ATTACKS = [
    Attack(
        "wildcard-retained",
        wildcard_over_retained.__doc__ or "",
        wildcard_over_retained,
        prepare_retained,
    ),
    Attack("filter-flood", filter_flood.__doc__ or "", filter_flood),
    Attack("deep-topics", deep_topics.__doc__ or "", deep_topics),
    Attack("subscription-flood", subscription_flood.__doc__ or "", subscription_flood),
    Attack("topic-name-flood", topic_name_flood.__doc__ or "", topic_name_flood),
    Attack("users-apart", users_apart.__doc__ or "", users_apart),
    Attack("small-ones", small_ones.__doc__ or "", small_ones),
]


@dataclass
class Outcome:
    attack: str
    ok: bool
    problem: str
    seconds: float
    slowest: float
    answers: int


def run_attack(broker: Broker, attack: Attack) -> Outcome:
    if attack.prepare is not None:
        attack.prepare(broker)
    start = time.monotonic()
    problem = ""
    with Sentinel(broker.port) as sentinel:
        try:
            attack.run(broker)
        except (AssertionError, OSError, ConnectionError) as error:
            problem = f"{type(error).__name__}: {error}"[:500]
        time.sleep(0.05)  # one more answer after the attack
    if not problem and sentinel.failure:
        problem = sentinel.failure
    if not problem and not broker.running():
        problem = "the broker died"
    return Outcome(
        attack.name,
        not problem,
        problem,
        time.monotonic() - start,
        sentinel.slowest,
        len(sentinel.latencies),
    )


# -- the floods ------------------------------------------------------------------------
# One client sends as fast as it can (for the wills, one attacker's many connections) while
# a bystander, an ordinary client, times the round trip of its own QoS 0 publications to a
# topic it subscribes to. A flood is a fixed number of bursts sent on a fixed schedule
# without waiting for the broker, and ends when the broker has acknowledged (for QoS 0:
# read) all of it. Each runs on a broker of its own.

FLOOD_BURSTS = 50  # bursts per flood (at most 65: QoS 1 packet ids are not reused)
BURST_SIZE = 1000  # packets per burst
BURST_EVERY = 0.02  # seconds from the start of one burst to the next
UNPACED_BURST = 3000  # publications per burst of the unpaced flood, sent back to back
WILLS_PER_BURST = 100  # connections per burst of the wills flood
FLOOD_PAYLOAD = b"x" * 64
PUBACK_TYPE, SUBACK_TYPE, UNSUBACK_TYPE = 4, 9, 11


@dataclass
class Bystander:
    """Publishes QoS 0 to a topic it subscribes to every `interval` seconds, on an ordinary
    connection, and times each round trip: what a flood costs everyone else."""

    port: int
    interval: float = 0.002
    topic: str = "open/bystander"
    latencies: list[float] = field(default_factory=list)
    failure: str = ""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def connect(self) -> None:
        self.raw = connected(self.port, "bystander", "alice")
        assert subscribe(self.raw, [self.topic]) == [0]

    def start(self) -> None:
        """Start timing (the flood calls it once its packets are encoded)."""
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        self.raw.close()

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            sequence += 1
            payload = str(sequence).encode()
            start = time.perf_counter()
            try:
                self.raw.send(Publish(self.topic, payload, 0))
                while True:
                    packet = self.raw.next(30.0)
                    if isinstance(packet, Publish) and packet.payload == payload:
                        break
            except (OSError, ConnectionError) as error:
                self.failure = f"the bystander lost its connection: {error!r}"
                return
            self.latencies.append(time.perf_counter() - start)
            self._stop.wait(self.interval)


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))  # ceil
    return ordered[min(len(ordered), int(rank)) - 1]


class Acks:
    """Counts the packets a flooding connection is sent, by packet type, on a thread of its
    own: the flood goes on meanwhile, and its answers never fill the socket."""

    def __init__(self, raw: Raw) -> None:
        self.sock = raw.sock
        self.counts = [0] * 16
        self.closed = False
        self._done = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pending = b""
        while not self._done.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self._changed:
                    self.closed = True
                    self._changed.notify_all()
                return
            data = pending + chunk
            size = len(data)
            pos = 0
            counted = [0] * 16
            while size - pos >= 2:
                index = pos + 1
                length = shift = 0
                while index < size:
                    byte = data[index]
                    index += 1
                    length |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        break
                    shift += 7
                else:
                    break  # the remaining length is not complete yet
                if index + length > size:
                    break
                counted[data[pos] >> 4] += 1
                pos = index + length
            pending = data[pos:]
            with self._changed:
                for kind, count in enumerate(counted):
                    self.counts[kind] += count
                self._changed.notify_all()

    def wait(self, kinds: tuple[int, ...], count: int, timeout: float = 120.0) -> int:
        """Wait until `count` packets of `kinds` came (or the connection closed, or the
        timeout); returns how many came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                got = sum(self.counts[kind] for kind in kinds)
                left = deadline - time.monotonic()
                if got >= count or self.closed or left <= 0:
                    return got
                self._changed.wait(left)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def flooder(port: int, client_id: str, clean: bool = True) -> tuple[Raw, Acks]:
    raw = connected(port, client_id, "bob", clean)
    raw.sock.settimeout(120.0)  # a paused reader blocks sendall: that is the point
    return raw, Acks(raw)


def send_bursts(raw: Raw, bursts: list[bytes], every: float = BURST_EVERY) -> None:
    """Each burst at its time, `every` seconds apart, without waiting for an answer."""
    start = time.monotonic()
    for n, burst in enumerate(bursts):
        delay = start + n * every - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        raw.sock.sendall(burst)


def publish_flood(
    broker: Broker,
    bursts: int,
    bystander: Bystander,
    kind: str,
    qos: int,
    retain: bool,
    size: int = BURST_SIZE,
    every: float = BURST_EVERY,
    payload: bytes = FLOOD_PAYLOAD,
) -> tuple[int, float]:
    """`bursts` bursts of `size` publications on 1,000 topics, `every` seconds apart; QoS 0
    ends with a QoS 1 publication, whose PUBACK says the broker read all of it."""
    raw, acks = flooder(broker.port, f"flood-{kind}")
    total = bursts * size
    frames = [
        encode(Publish(f"flood/{kind}/{n % 1000}", payload, qos, retain, packet_id=n % 65535 + 1))
        for n in range(total)
    ]
    plan = [b"".join(frames[n : n + size]) for n in range(0, total, size)]
    bystander.start()
    start = time.monotonic()
    try:
        send_bursts(raw, plan, every)
        if qos == 0:
            raw.send(Publish("flood/done", b"", 1, packet_id=1))
            expected = 1
        else:
            expected = total
        got = acks.wait((PUBACK_TYPE,), expected)
        seconds = time.monotonic() - start
        assert got == expected, f"{got} of {expected} PUBACKs"
    finally:
        acks.stop()
        raw.close()
    return total, seconds


def flood_qos0(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 1,000 QoS 0 publications, one every 20 ms, from one client."""
    return publish_flood(broker, bursts, bystander, "q0", 0, False)


def flood_qos1(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 1,000 QoS 1 publications, one every 20 ms, from one client; every one is
    acknowledged."""
    return publish_flood(broker, bursts, bystander, "q1", 1, False)


def flood_retained(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 1,000 retained QoS 0 publications on 1,000 topics, one every 20 ms (the
    issue's flood)."""
    return publish_flood(broker, bursts, bystander, "r", 0, True)


def flood_large(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 1,000 QoS 0 publications of 1 KiB, sent back to back: full reads of 256 KB
    that hold few packets each."""
    return publish_flood(broker, bursts, bystander, "l", 0, False, every=0.0, payload=b"x" * 1024)


def flood_unpaced(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 3,000 retained QoS 0 publications on 1,000 topics, sent back to back: as
    fast as the broker reads them (the store falls behind)."""
    return publish_flood(broker, bursts, bystander, "u", 0, True, UNPACED_BURST, 0.0)


def flood_wills(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 100 connections, one every 20 ms, each with a retained QoS 1 will on a
    topic of its own, dropped without DISCONNECT; every will is published."""
    total = bursts * WILLS_PER_BURST
    password = PASSWORDS["bob"].encode()
    connects = [
        encode(
            Connect(
                f"flood-will-{n}",
                username="bob",
                password=password,
                will=Will(f"flood/w/{n}", b"gone", 1, True),
            )
        )
        for n in range(total)
    ]
    bystander.start()
    start = time.monotonic()
    for burst in range(bursts):
        delay = start + burst * BURST_EVERY - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        socks = []
        for n in range(burst * WILLS_PER_BURST, (burst + 1) * WILLS_PER_BURST):
            sock = socket.create_connection(("127.0.0.1", broker.port), 60)
            sock.sendall(connects[n])
            socks.append(sock)
        for sock in socks:
            answer = b""
            while len(answer) < 4:
                chunk = sock.recv(4 - len(answer))
                assert chunk, "a will's connection was closed before its CONNACK"
                answer += chunk
            assert answer == b"\x20\x02\x00\x00", answer
            sock.close()
    checker = connected(broker.port, "flood-will-check", "bob")
    try:
        checker.send(Subscribe(1, [("flood/w/#", 0)]))
        seen: set[str] = set()
        while len(seen) < total:
            packet = checker.next(60.0)
            if isinstance(packet, Publish):
                seen.add(packet.topic)
    finally:
        checker.close()
    return total, time.monotonic() - start


def flood_subscriptions(broker: Broker, bursts: int, bystander: Bystander) -> tuple[int, float]:
    """Bursts of 1,000 SUBSCRIBE and UNSUBSCRIBE packets in turn, one every 20 ms, from a
    persistent session (each change is written to the store); every one is answered."""
    raw, acks = flooder(broker.port, "flood-subs", clean=False)
    total = bursts * BURST_SIZE
    frames = [
        encode(Subscribe(n + 1, [(f"flood/s/{n // 2}", 1)]))
        if n % 2 == 0
        else encode(Unsubscribe(n + 1, [f"flood/s/{n // 2}"]))
        for n in range(total)
    ]
    plan = [b"".join(frames[n : n + BURST_SIZE]) for n in range(0, total, BURST_SIZE)]
    bystander.start()
    start = time.monotonic()
    try:
        send_bursts(raw, plan)
        got = acks.wait((SUBACK_TYPE, UNSUBACK_TYPE), total)
        seconds = time.monotonic() - start
        assert got == total, f"{got} of {total} SUBACKs and UNSUBACKs"
    finally:
        acks.stop()
        raw.close()
    return total, seconds


@dataclass
class Flood:
    name: str
    summary: str
    run: Callable[[Broker, int, Bystander], tuple[int, float]]


FLOODS = [
    Flood("flood-qos0", flood_qos0.__doc__ or "", flood_qos0),
    Flood("flood-qos1", flood_qos1.__doc__ or "", flood_qos1),
    Flood("flood-retained", flood_retained.__doc__ or "", flood_retained),
    Flood("flood-large", flood_large.__doc__ or "", flood_large),
    Flood("flood-unpaced", flood_unpaced.__doc__ or "", flood_unpaced),
    Flood("flood-wills", flood_wills.__doc__ or "", flood_wills),
    Flood("flood-subscribe", flood_subscriptions.__doc__ or "", flood_subscriptions),
]


@dataclass
class FloodOutcome:
    flood: str
    ok: bool
    problem: str
    count: int  # publications, wills or subscription changes the flood made
    seconds: float  # from its first burst to the broker's last answer
    latencies: list[float]  # the bystander's round trips, in seconds

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def ms(self, fraction: float) -> float:
        return percentile(self.latencies, fraction) * 1000


def run_flood(broker: Broker, flood: Flood, bursts: int = FLOOD_BURSTS) -> FloodOutcome:
    """One flood against `broker` while the bystander times its round trips."""
    bystander = Bystander(broker.port)
    bystander.connect()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the bystander's thread is not kept waiting here
    problem = ""
    count, seconds = 0, 0.0
    try:
        try:
            count, seconds = flood.run(broker, bursts, bystander)
        except (AssertionError, OSError, ConnectionError) as error:
            problem = f"{type(error).__name__}: {error}"[:500]
        time.sleep(0.05)  # one more round trip after the flood
    finally:
        bystander.stop()
        sys.setswitchinterval(switch)
    if not problem and bystander.failure:
        problem = bystander.failure
    if not problem and not broker.running():
        problem = "the broker died"
    return FloodOutcome(flood.name, not problem, problem, count, seconds, bystander.latencies)


SHARES = ("load/reads held", "store/pauses")  # how often the broker held back one client


def sys_figures(port: int, names: tuple[str, ...], timeout: float = 3.0) -> dict[str, str]:
    """The next value the broker publishes of each `$SYS/broker/<name>` (a broker that has
    no such figure: none)."""
    raw = connected(port, "flood-sys", "alice")
    values: dict[str, str] = {}
    try:
        raw.send(Subscribe(1, [(f"$SYS/broker/{name}", 0) for name in names]))
        deadline = time.monotonic() + timeout
        while len(values) < len(names) and time.monotonic() < deadline:
            try:
                packet = raw.next(max(0.01, deadline - time.monotonic()))
            except (TimeoutError, OSError):
                break
            if isinstance(packet, Publish) and not packet.retain:  # fresh, not the last one
                values[packet.topic.removeprefix("$SYS/broker/")] = packet.payload.decode()
    finally:
        raw.close()
    return values


def run_floods(floods: list[Flood], workdir: Path, bursts: int, bound_ms: float) -> bool:
    """Each flood on a broker of its own; prints one line each; True when all passed.
    `held` and `paused`: how often the broker held a read for a later turn, and paused a
    client until a commit ended (`$SYS/broker/load/reads held`, `.../store/pauses`)."""
    print(
        f"\n{'flood':16} {'verdict':7} {'count':>6} {'seconds':>7} {'per s':>7}"
        f" {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'samples':>7} {'held':>6} {'paused':>6}",
        flush=True,
    )
    passed = True
    for flood in floods:
        (workdir / flood.name).mkdir()
        broker = Broker(workdir / flood.name)
        broker.start()
        try:
            outcome = run_flood(broker, flood, bursts)
            shares = sys_figures(broker.port, SHARES)
        finally:
            broker.stop()
        p99 = outcome.ms(0.99)
        verdict = "PASS" if outcome.ok and outcome.latencies and p99 <= bound_ms else "FAIL"
        passed &= verdict == "PASS"
        print(
            f"{outcome.flood:16} {verdict:7} {outcome.count:6d} {outcome.seconds:7.2f}"
            f" {outcome.rate:7.0f} {outcome.ms(0.5):7.1f} {p99:7.1f}"
            f" {max(outcome.latencies, default=0.0) * 1000:7.1f} {len(outcome.latencies):7d}"
            f" {shares.get(SHARES[0], '-'):>6} {shares.get(SHARES[1], '-'):>6}"
            + (f"  {outcome.problem}" if outcome.problem else "")
            + (f"  (bound: p99 {bound_ms:.0f} ms)" if outcome.ok and p99 > bound_ms else ""),
            flush=True,
        )
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound-ms", type=float, default=100.0)
    parser.add_argument(
        "--attack", action="append", default=[], help="one attack or flood (repeat)"
    )
    parser.add_argument("--bursts", type=int, default=FLOOD_BURSTS, help="bursts per flood")
    parser.add_argument("--list", action="store_true", help="list the attacks and exit")
    args = parser.parse_args(argv)
    known = {attack.name: attack for attack in ATTACKS}
    floods = {flood.name: flood for flood in FLOODS}
    if args.list:
        listed = [(a.name, a.summary) for a in ATTACKS] + [(f.name, f.summary) for f in FLOODS]
        for name, summary in listed:
            print(f"{name:20} {' '.join(summary.split())}")
        return 0
    unknown = [name for name in args.attack if name not in known and name not in floods]
    if unknown:
        parser.error(f"unknown attack {unknown[0]!r} (known: {', '.join([*known, *floods])})")
    if not 1 <= args.bursts <= 65:
        parser.error("--bursts must be from 1 to 65")
    chosen = [known[name] for name in args.attack if name in known]
    chosen_floods = [floods[name] for name in args.attack if name in floods]
    if not args.attack:
        chosen, chosen_floods = ATTACKS, FLOODS
    workdir = Path(tempfile.mkdtemp(prefix="telemq-hostile-"))
    failed = False
    if chosen:
        broker = Broker(workdir)
        broker.start()
        try:
            print(f"{'attack':20} {'outcome':8} {'seconds':>8} {'sentinel max ms':>16} answers")
            for attack in chosen:
                outcome = run_attack(broker, attack)
                over = outcome.slowest * 1000 > args.bound_ms
                verdict = "ok" if outcome.ok and not over else "FAIL"
                failed |= verdict != "ok"
                print(
                    f"{outcome.attack:20} {verdict:8} {outcome.seconds:8.1f} "
                    f"{outcome.slowest * 1000:16.1f} {outcome.answers:7d}"
                    + (f"  {outcome.problem}" if outcome.problem else "")
                    + (f"  (bound {args.bound_ms:.0f} ms)" if over else "")
                )
        finally:
            broker.stop()
    if chosen_floods:
        failed |= not run_floods(chosen_floods, workdir, args.bursts, args.bound_ms)
    if failed:
        print(f"kept the brokers' logs under {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
