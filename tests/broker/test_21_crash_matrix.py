"""Crash matrix: SIGKILL of the broker at seeded random points of several kinds of traffic.

``test_10_crash`` covers one persistent publisher that resends everything and one live
persistent subscriber, both QoS together. The matrix covers the rest, one scenario each, a few
kills per scenario (each 0.3-1.0 s, seeded, after the broker is ready), SQLite store with
``sync = full``:

* **publish in, QoS 1 / QoS 2**: a clean-session publisher that never resends (what it did not
  see acknowledged it abandons) publishes to an *offline* persistent session. The acknowledged
  set is every PUBACK (QoS 1) or PUBREC (QoS 2) it saw. Afterwards the session drains: every
  acknowledged publication is there (QoS 2 exactly once), and the journal has contiguous
  seqs holding every acknowledged publication exactly once (nothing was resent).
* **deliveries out, QoS 1 / QoS 2**: a queue filled beforehand (larger than the in-flight
  window) is drained by a slow persistent subscriber that reconnects after every restart:
  every message arrives, QoS 2 exactly once (the subscriber is a "method B" receiver: a
  PUBLISH whose packet id awaits PUBREL is the same message again).
* **RegSub / DeregSub**: commands with replies (JSON form, QoS 1); after the last restart a
  registration whose reply was received exists, an acknowledged deregistration is gone.
* **retained updates**: one update at a time (QoS 1 or 2, some deletions) over a few topics;
  after every restart a new subscriber gets, per topic, the last acknowledged value or the
  one update that was in flight at the kill.
* **journal read by Spark** while the broker is killed: every read returns contiguous seqs or
  fails with an exception; after the restart the journal is contiguous and holds every
  acknowledged publication once.

One kill point the random scenarios reach only sometimes is also tested deterministically: a
QoS 2 publication acknowledged with PUBREC to a clean session, the broker killed before the
PUBREL.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from telemq.store.sqlite import open_journal_reader

from .conftest import BrokerFactory
from .helpers import (
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    BrokerProcess,
    ConnectionClosed,
    Packet,
    RawClient,
    ack_packet,
    collect_until,
    connect_packet,
    parse_connack,
    parse_publish,
    publish_packet,
    raw_connected,
    subscribe_packet,
    unique,
    write_config,
)

pytestmark = [pytest.mark.interop]

SEED = 20261122
KILLS = 3
KILL_AFTER = (0.3, 1.0)  # seconds after the broker is ready
SCENARIO_DEADLINE = 40.0  # seconds for the traffic to finish after the last restart
CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
RESPONSE_PREFIX = "SYSTEM.BROKER.RESPONSE/"
# Offline queues in these scenarios are larger than the default limit of 1,000.
UNLIMITED_QUEUES = "[limits]\nmax_queued_messages = 0\n"


def unlimited_queue_broker(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    """A durable broker whose offline queues keep everything (no drop policy in the way)."""
    config = write_config(tmp_path / "crash.toml", UNLIMITED_QUEUES)
    return broker_factory("--sync", "full", "--store", "sqlite", config=config)


# ---------------------------------------------------------------------------------------------
# Shared plumbing
# ---------------------------------------------------------------------------------------------


def connect(port: int, client_id: str, *, clean: bool) -> tuple[RawClient, bool]:
    """Connect (keep-alive 0); returns the client and the session-present flag."""
    client = RawClient(port, timeout=2.0)
    try:
        client.send(connect_packet(client_id, clean=clean, keepalive=0))
        ack = parse_connack(client.recv_packet(5.0))
    except BaseException:
        client.close()
        raise
    if ack.return_code != 0:
        client.close()
        raise ConnectionClosed(f"CONNACK {ack.return_code}")
    return client, bool(ack.session_present)


def reconnect(
    port: int, client_id: str, stop: threading.Event, *, clean: bool
) -> tuple[RawClient, bool] | None:
    """Retry `connect` until it works or ``stop`` is set (the broker may be down)."""
    while not stop.is_set():
        try:
            return connect(port, client_id, clean=clean)
        except (OSError, ConnectionClosed, TimeoutError, AssertionError):
            time.sleep(0.05)
    return None


def kill_repeatedly(
    broker: BrokerProcess,
    rng: random.Random,
    progress: Callable[[], int],
    *,
    kills: int = KILLS,
    between: Callable[[], None] | None = None,
) -> list[tuple[float, int]]:
    """SIGKILL and restart the broker ``kills`` times at seeded random delays; ``between``
    runs while the broker is down. Returns (delay, progress at the kill) per kill."""
    done: list[tuple[float, int]] = []
    for _ in range(kills):
        delay = rng.uniform(*KILL_AFTER)
        time.sleep(delay)
        done.append((round(delay, 3), progress()))
        broker.kill()
        if between is not None:
            between()
        broker.start()
    return done


def assert_kills_hit(kills: list[tuple[float, int]], total: int) -> None:
    """The kills must land inside the traffic, or the scenario proves nothing."""
    assert any(0 < made < total for _, made in kills), f"no kill hit the traffic: {kills}"


def journal_seqs_and_payloads(data_dir: Path, topic: str) -> tuple[list[int], Counter[bytes]]:
    """All journal seqs in order, and how often each payload on ``topic`` was journaled."""
    conn = open_journal_reader(data_dir)
    try:
        seqs = [row[0] for row in conn.execute("SELECT seq FROM journal ORDER BY seq")]
        payloads = Counter(
            bytes(row[0])
            for row in conn.execute("SELECT payload FROM journal WHERE topic = ?", (topic,))
        )
    finally:
        conn.close()
    return seqs, payloads


def assert_contiguous(seqs: list[int]) -> None:
    assert seqs, "the journal is empty"
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (
        f"journal seqs not contiguous/unique: {len(seqs)} rows from {seqs[0]} to {seqs[-1]}, "
        f"duplicates {sorted(s for s, n in Counter(seqs).items() if n > 1)[:10]}"
    )


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_threads(*targets: Callable[[threading.Event], None]) -> tuple[threading.Event, list[Any]]:
    stop = threading.Event()
    threads = [threading.Thread(target=t, args=(stop,), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    return stop, threads


def stop_threads(stop: threading.Event, threads: list[threading.Thread]) -> None:
    stop.set()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} did not stop"


# ---------------------------------------------------------------------------------------------
# A publisher that never resends, and a QoS 1/2 receiver that tolerates redelivery
# ---------------------------------------------------------------------------------------------


@dataclass
class OneShotPublisher:
    """Publishes ``payload(n)`` for n in range(total) to ``topic`` at ``qos`` with a window,
    paced, on a clean session; on a lost connection it abandons what is in flight."""

    port: int
    topic: str
    qos: int
    total: int
    pace: float = 400.0  # messages per second
    window: int = 20
    client_id: str = field(default_factory=lambda: unique("osp"))
    acked: set[int] = field(default_factory=set)  # PUBACK (QoS 1) or PUBREC (QoS 2) seen
    abandoned: set[int] = field(default_factory=set)
    next_index: int = 0
    connections: int = 0
    errors: list[str] = field(default_factory=list)

    @staticmethod
    def payload(n: int) -> bytes:
        return f"m{n}".encode()

    @property
    def done(self) -> bool:
        return self.next_index == self.total and not self._inflight

    def __post_init__(self) -> None:
        self._inflight: dict[int, tuple[int, str]] = {}  # packet id -> (n, "publish"|"pubrel")

    def run(self, stop: threading.Event) -> None:
        start = time.monotonic()
        while not stop.is_set() and not self.done:
            conn = reconnect(self.port, self.client_id, stop, clean=True)
            if conn is None:
                return
            client, _ = conn
            self.connections += 1
            try:
                self._pump(client, stop, start)
                if self.done:
                    client.disconnect()
            except (OSError, ConnectionClosed):
                pass
            except AssertionError as exc:
                self.errors.append(str(exc))
                return
            finally:
                client.close()
                # Whatever was in flight is abandoned: the publisher never resends.
                self.abandoned |= {n for n, _ in self._inflight.values()}
                self._inflight.clear()

    def _pump(self, client: RawClient, stop: threading.Event, start: float) -> None:
        pid = 0
        while not stop.is_set() and not self.done:
            allowed = int((time.monotonic() - start) * self.pace) + self.window
            while (
                len(self._inflight) < self.window
                and self.next_index < self.total
                and self.next_index < allowed
            ):
                pid = pid % 65535 + 1
                n = self.next_index
                self.next_index += 1
                self._inflight[pid] = (n, "publish")
                client.send(publish_packet(self.topic, self.payload(n), qos=self.qos, pid=pid))
            packet = client.try_recv_packet(0.01)
            while packet is not None:
                self._on_packet(client, packet)
                packet = client.try_recv_packet(0)

    def _on_packet(self, client: RawClient, p: Packet) -> None:
        entry = self._inflight.get(p.pid)
        assert entry is not None, f"ack for unknown packet id: {p!r}"
        n, stage = entry
        if p.type == PUBACK and self.qos == 1:
            self.acked.add(n)
            del self._inflight[p.pid]
        elif p.type == PUBREC and self.qos == 2 and stage == "publish":
            self.acked.add(n)
            self._inflight[p.pid] = (n, "pubrel")
            client.send(ack_packet(PUBREL, p.pid))
        elif p.type == PUBCOMP and self.qos == 2 and stage == "pubrel":
            del self._inflight[p.pid]
        else:
            raise AssertionError(f"publisher got unexpected {p!r} (stage {stage})")


@dataclass
class Receiver:
    """A persistent session's client that receives ``m<n>`` payloads and answers the QoS 1/2
    flows, reconnecting after every restart. QoS 2 "method B": a message is taken on the first
    PUBLISH of a packet id; a PUBLISH with an id still awaiting PUBREL is a resend."""

    port: int
    client_id: str
    ack_delay: float = 0.0  # seconds before each acknowledgement: a slow consumer
    received: list[int] = field(default_factory=list)
    unreleased: set[int] = field(default_factory=set)
    sessions_lost: int = 0
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.received)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            conn = reconnect(self.port, self.client_id, stop, clean=False)
            if conn is None:
                return
            client, present = conn
            self.connections += 1
            if not present:
                self.sessions_lost += 1
            try:
                while not stop.is_set():
                    packet = client.try_recv_packet(0.05)
                    if packet is not None:
                        self._on_packet(client, packet)
            except (OSError, ConnectionClosed):
                pass
            except (AssertionError, ValueError) as exc:
                self.errors.append(str(exc))
                return
            finally:
                client.close()

    def _on_packet(self, client: RawClient, p: Packet) -> None:
        if p.type == PUBREL:
            with self.lock:
                self.unreleased.discard(p.pid)
            client.send(ack_packet(PUBCOMP, p.pid))
            return
        assert p.type == PUBLISH, f"receiver got unexpected {p!r}"
        message = parse_publish(p)
        assert message.pid is not None and message.qos in (1, 2), message
        n = int(message.payload[1:])
        if self.ack_delay:
            time.sleep(self.ack_delay)
        with self.lock:
            if message.qos == 1:
                self.received.append(n)
            elif message.pid not in self.unreleased:
                self.unreleased.add(message.pid)
                self.received.append(n)
        client.send(ack_packet(PUBACK if message.qos == 1 else PUBREC, message.pid))


def check_deliveries(
    qos: int, expected: set[int], received: list[int], published: int, receiver: Receiver
) -> list[str]:
    problems: list[str] = []
    missing = sorted(expected - set(received))
    if missing:
        problems.append(f"{len(missing)} acknowledged messages never delivered: {missing[:20]}")
    if qos == 2:
        twice = sorted(n for n, c in Counter(received).items() if c > 1)
        if twice:
            problems.append(f"QoS 2 delivered more than once: {twice[:20]}")
    stray = sorted({n for n in received if not 0 <= n < published})
    if stray:
        problems.append(f"payloads never published: {stray[:20]}")
    if receiver.sessions_lost:
        problems.append(f"the persistent session was lost {receiver.sessions_lost} time(s)")
    if receiver.errors:
        problems.append(f"receiver errors: {receiver.errors}")
    return problems


# ---------------------------------------------------------------------------------------------
# Scenarios: QoS 1 / QoS 2 in, and out
# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("qos", [1, 2])
def test_publish_in_acknowledged_set_survives_kills(
    broker_factory: BrokerFactory, tmp_path: Path, qos: int
) -> None:
    rng = random.Random(f"{SEED}-in-{qos}")
    broker = unlimited_queue_broker(broker_factory, tmp_path)
    topic = unique("cm/in/")
    session = unique("cmin")
    with raw_connected(broker.port, session, clean=False) as sub:
        assert sub.subscribe([(topic, qos)]) == [qos]
        sub.disconnect()

    publisher = OneShotPublisher(broker.port, topic, qos, total=1500)
    stop, threads = run_threads(publisher.run)
    try:
        kills = kill_repeatedly(broker, rng, lambda: len(publisher.acked))
        finished = wait_for(lambda: publisher.done or bool(publisher.errors), SCENARIO_DEADLINE)
    finally:
        stop_threads(stop, threads)
    summary = (
        f"kills (delay, acked before): {kills}; publisher: {len(publisher.acked)} acked, "
        f"{len(publisher.abandoned)} abandoned, {publisher.connections} connections, "
        f"errors {publisher.errors}"
    )
    assert finished and not publisher.errors, summary
    assert_kills_hit(kills, publisher.total)

    # The offline session drains everything queued for it, then a sentinel.
    receiver = Receiver(broker.port, session)
    with raw_connected(broker.port) as pub:
        pub.publish(topic, b"m-1", qos=qos)  # n = -1: the sentinel
        pub.disconnect()
    stop, threads = run_threads(receiver.run)
    try:
        wait_for(lambda: -1 in receiver.received or bool(receiver.errors), SCENARIO_DEADLINE)
    finally:
        stop_threads(stop, threads)
    received = [n for n in receiver.received if n != -1]
    problems = check_deliveries(qos, publisher.acked, received, publisher.total, receiver)
    if -1 not in receiver.received:
        problems.append("the sentinel never arrived")

    # The journal: contiguous seqs; every acknowledged publication exactly once (nothing was
    # resent, so nothing may be there twice either).
    seqs, journaled = journal_seqs_and_payloads(broker.data_dir, topic)
    assert_contiguous(seqs)
    missing = sorted(n for n in publisher.acked if journaled[OneShotPublisher.payload(n)] == 0)
    if missing:
        problems.append(f"acknowledged but not journaled: {missing[:20]}")
    twice = sorted(p.decode() for p, c in journaled.items() if c > 1)
    if twice:
        problems.append(f"journaled more than once: {twice[:20]}")
    if problems:
        pytest.fail("\n".join([*problems, summary]), pytrace=False)


@pytest.mark.timeout(60)
def test_qos2_received_but_not_released_at_the_kill_is_journaled_and_retained(
    broker_factory: BrokerFactory,
) -> None:
    """The kill point the random scenarios hit only sometimes, made certain: a clean-session
    publisher has its QoS 2 retained publication acknowledged (PUBREC), and the broker is
    killed before the PUBREL. The broker releases such a message at restart (its publisher's
    session is gone); released, it must be what any release makes it: delivered once, the
    topic's retained message, and in the journal."""
    broker = broker_factory("--sync", "full", "--store", "sqlite")
    topic = unique("cm/held/")
    session = unique("cmheld")
    with raw_connected(broker.port, session, clean=False) as sub:
        assert sub.subscribe([(topic, 2)]) == [2]
        sub.disconnect()
    with raw_connected(broker.port, unique("cmpub")) as pub:
        pub.send(publish_packet(topic, b"held", qos=2, pid=5, retain=True))
        pub.expect_ack(PUBREC, 5)
        broker.kill()
    broker.start()

    with RawClient(broker.port) as sub:
        assert sub.connect(session, clean=False).session_present == 1
        with raw_connected(broker.port) as pub:
            pub.publish(topic, b"sentinel", qos=2)
            pub.disconnect()
        got = [m.payload for m in collect_until(sub, b"sentinel")]
        sub.disconnect()
    _, journaled = journal_seqs_and_payloads(broker.data_dir, topic)
    with raw_connected(broker.port) as fresh:
        assert fresh.subscribe([(topic, 1)]) == [1]
        with raw_connected(broker.port) as pub:
            pub.publish(topic, b"end", qos=1)
            pub.disconnect()
        retained = [m.payload for m in collect_until(fresh, b"end") if m.retain]
        fresh.disconnect()
    outcome = {"delivered": got, "journaled": journaled[b"held"], "retained": retained}
    assert outcome == {"delivered": [b"held", b"sentinel"], "journaled": 1, "retained": [b"held"]}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("qos", [1, 2])
def test_queued_deliveries_survive_kills_while_draining(
    broker_factory: BrokerFactory, tmp_path: Path, qos: int
) -> None:
    rng = random.Random(f"{SEED}-out-{qos}")
    broker = unlimited_queue_broker(broker_factory, tmp_path)
    topic = unique("cm/out/")
    session = unique("cmout")
    total = 1200
    with raw_connected(broker.port, session, clean=False) as sub:
        assert sub.subscribe([(topic, qos)]) == [qos]
        sub.disconnect()
    with raw_connected(broker.port) as pub:
        for n in range(total):
            pub.publish(topic, OneShotPublisher.payload(n), qos=qos)
        pub.disconnect()

    receiver = Receiver(broker.port, session, ack_delay=0.002)
    stop, threads = run_threads(receiver.run)
    try:
        kills = kill_repeatedly(broker, rng, receiver.count)
        wait_for(
            lambda: set(range(total)) <= set(receiver.received) or bool(receiver.errors),
            SCENARIO_DEADLINE,
        )
    finally:
        stop_threads(stop, threads)
    summary = (
        f"kills (delay, received before): {kills}; receiver: {len(receiver.received)} "
        f"deliveries, {receiver.connections} connections"
    )
    assert_kills_hit(kills, total)
    problems = check_deliveries(qos, set(range(total)), receiver.received, total, receiver)
    if problems:
        pytest.fail("\n".join([*problems, summary]), pytrace=False)


# ---------------------------------------------------------------------------------------------
# Scenario: RegSub / DeregSub
# ---------------------------------------------------------------------------------------------


def command_payload(command: str, queue: str, topic: str, correl_id: str) -> bytes:
    """An MQ command in the JSON form (docs/mq.md)."""
    return json.dumps(
        {
            "mqmd": {"CorrelId": correl_id},
            "psc": {"Command": command, "QName": queue, "Topic": [topic]},
        }
    ).encode()


@dataclass
class Op:
    command: str  # RegSub | DeregSub
    index: int  # the topic's number
    correl_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16].upper())
    sent: bool = False
    completion: str | None = None  # from the reply: ok | warning | error
    reasons: list[int] = field(default_factory=list)

    @property
    def acknowledged(self) -> bool:
        return self.completion is not None


@dataclass
class Commander:
    """Sends RegSub/DeregSub commands one at a time and pairs replies by CorrelId (a reply
    that arrives after a reconnection still counts). Never resends."""

    port: int
    queue: str
    prefix: str
    ops: list[Op]
    pace: float = 0.005  # seconds between commands
    client_id: str = field(default_factory=lambda: unique("cmd"))
    done_count: int = 0  # ops sent whose reply arrived or whose connection was lost
    errors: list[str] = field(default_factory=list)

    def topic(self, index: int) -> str:
        return f"{self.prefix}/{index}"

    def run(self, stop: threading.Event) -> None:
        by_correl = {op.correl_id: op for op in self.ops}
        position = 0
        while not stop.is_set() and position < len(self.ops):
            conn = reconnect(self.port, self.client_id, stop, clean=False)
            if conn is None:
                return
            client, _ = conn
            try:
                client.send(subscribe_packet(1, [(RESPONSE_PREFIX + self.client_id, 1)]))
                while position < len(self.ops) and not stop.is_set():
                    op = self.ops[position]
                    position += 1
                    op.sent = True
                    payload = command_payload(
                        op.command, self.queue, self.topic(op.index), op.correl_id
                    )
                    pid = position % 65535 + 1
                    client.send(publish_packet(CONTROL_QUEUE, payload, qos=1, pid=pid))
                    self._await_reply(client, op, by_correl)
                    self.done_count += 1
                    time.sleep(self.pace)
            except (OSError, ConnectionClosed, TimeoutError):
                self.done_count += 1
            except AssertionError as exc:
                self.errors.append(str(exc))
                return
            finally:
                client.close()

    def _await_reply(self, client: RawClient, op: Op, by_correl: dict[str, Op]) -> None:
        deadline = time.monotonic() + 10
        while not op.acknowledged:
            p = client.recv_packet(max(0.0, deadline - time.monotonic()))
            if p.type in (PUBACK, SUBACK):
                continue
            assert p.type == PUBLISH, f"commander got unexpected {p!r}"
            message = parse_publish(p)
            if message.qos == 1:
                assert message.pid is not None
                client.send(ack_packet(PUBACK, message.pid))
            reply = json.loads(message.payload)
            replied = by_correl.get(str(reply.get("mqmd", {}).get("CorrelId", "")).upper())
            assert replied is not None, f"reply to no command of ours: {reply}"
            pscr = reply["pscr"]
            replied.completion = str(pscr["Completion"])
            replied.reasons = [int(r["Reason"]) for r in pscr.get("Response", [])]


def registered_topics(port: int, queue: str) -> set[str]:
    """The topics registered for ``queue`` (telemq's ListSubs command)."""
    client_id = unique("lst")
    with raw_connected(port, client_id) as client:
        assert client.subscribe([(RESPONSE_PREFIX + client_id, 1)]) == [1]
        payload = json.dumps({"psc": {"Command": "ListSubs", "QName": queue}}).encode()
        client.publish(CONTROL_QUEUE, payload, qos=1, complete=False)
        while True:
            p = client.recv_packet()
            if p.type == PUBLISH:
                break
        message = parse_publish(p)
        if message.qos == 1:
            assert message.pid is not None
            client.send(ack_packet(PUBACK, message.pid))
        client.disconnect()
    reply = json.loads(message.payload)["pscr"]
    assert reply["Completion"] == "ok", reply
    topics: set[str] = set()
    for sub in reply.get("Subscriptions", []):
        value = sub["Topic"]
        topics.update(value if isinstance(value, list) else [value])
    return topics


@pytest.mark.timeout(90)
def test_regsub_deregsub_acknowledged_by_reply_survive_kills(
    broker_factory: BrokerFactory,
) -> None:
    rng = random.Random(f"{SEED}-regsub")
    broker = broker_factory("--sync", "full", "--store", "sqlite")
    count = 400
    ops: list[Op] = []
    for i in range(count):
        ops.append(Op("RegSub", i))
        if i >= 2 and i % 2 == 0:
            ops.append(Op("DeregSub", i - 2))  # every even topic is deregistered later
    commander = Commander(broker.port, unique("cmq"), unique("cm/reg"), ops)
    stop, threads = run_threads(commander.run)

    def halt_commander() -> None:
        stop.set()  # the last kill: the commander stops while the broker is down

    try:
        kills = kill_repeatedly(broker, rng, lambda: commander.done_count)
        kills += kill_repeatedly(
            broker, rng, lambda: commander.done_count, kills=1, between=halt_commander
        )
    finally:
        stop_threads(stop, threads)
    assert not commander.errors, commander.errors
    sent = [op for op in ops if op.sent]
    summary = (
        f"kills (delay, commands done before): {kills}; {len(sent)} of {len(ops)} commands "
        f"sent, {sum(op.acknowledged for op in sent)} acknowledged"
    )
    assert_kills_hit(kills, len(ops))

    present = registered_topics(broker.port, commander.queue)
    problems: list[str] = []
    last_op: dict[int, Op] = {}
    for op in sent:
        last_op[op.index] = op
    for op in sent:
        if op.acknowledged and op.command == "RegSub" and op.completion != "ok":
            problems.append(f"RegSub {op.index} answered {op.completion} {op.reasons}")
        # DeregSub 3073 (not registered) is allowed when its RegSub was lost (checked below).
        deregistered = op.completion == "ok" or op.reasons == [3073]
        if op.acknowledged and op.command == "DeregSub" and not deregistered:
            problems.append(f"DeregSub {op.index} answered {op.completion} {op.reasons}")
    for index, op in sorted(last_op.items()):
        topic = commander.topic(index)
        if not op.acknowledged:
            continue  # the last command on this topic may or may not have been applied
        if op.command == "RegSub" and topic not in present:
            problems.append(f"RegSub of {topic} acknowledged, registration gone")
        if op.command == "DeregSub" and topic in present:
            problems.append(f"DeregSub of {topic} acknowledged, registration still there")
    for op in ops:
        if not op.sent and op.command == "RegSub" and commander.topic(op.index) in present:
            problems.append(f"{commander.topic(op.index)} registered but never sent")
    lost_regs = [op.index for op in sent if op.command == "DeregSub" and op.reasons == [3073]]
    for index in lost_regs:
        reg = next(o for o in sent if o.command == "RegSub" and o.index == index)
        if reg.acknowledged:
            problems.append(
                f"DeregSub {index} found no registration, but its RegSub was acknowledged"
            )
    if problems:
        pytest.fail("\n".join([*problems, summary]), pytrace=False)


# ---------------------------------------------------------------------------------------------
# Scenario: retained updates
# ---------------------------------------------------------------------------------------------


@dataclass
class RetainedUpdater:
    """Updates ``topics`` retained topics one publication at a time (QoS 1 or 2 at random,
    one in six a deletion) on a clean session, never resending; ``hold`` parks it without
    a connection so that the retained state can be checked."""

    port: int
    prefix: str
    topics: int
    rng: random.Random
    client_id: str = field(default_factory=lambda: unique("ret"))
    hold: threading.Event = field(default_factory=threading.Event)
    parked: threading.Event = field(default_factory=threading.Event)
    # Per topic: the last acknowledged value (None: none or deleted), and the updates sent
    # after it without an acknowledgement (None: a deletion).
    acked: dict[int, bytes | None] = field(default_factory=dict)
    pending: dict[int, list[bytes | None]] = field(default_factory=dict)
    updates: int = 0
    errors: list[str] = field(default_factory=list)

    def topic(self, index: int) -> str:
        return f"{self.prefix}/{index}"

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self.hold.is_set():
                self.parked.set()
                time.sleep(0.02)
                continue
            self.parked.clear()
            try:
                client, _ = connect(self.port, self.client_id, clean=True)
            except (OSError, ConnectionClosed, TimeoutError, AssertionError):
                time.sleep(0.05)  # the broker is down: retry, unless told to hold
                continue
            try:
                while not stop.is_set() and not self.hold.is_set():
                    self._update(client)
            except (OSError, ConnectionClosed, TimeoutError):
                pass
            except AssertionError as exc:
                self.errors.append(str(exc))
                return
            finally:
                client.close()

    def _update(self, client: RawClient) -> None:
        index = self.rng.randrange(self.topics)
        qos = self.rng.choice((1, 2))
        value: bytes | None = None if self.rng.random() < 1 / 6 else f"v{self.updates}".encode()
        self.updates += 1
        self.pending.setdefault(index, []).append(value)
        pid = self.updates % 65535 + 1
        client.send(publish_packet(self.topic(index), value or b"", qos=qos, pid=pid, retain=True))
        client.expect_ack(PUBACK if qos == 1 else PUBREC, pid, timeout=5)
        # Acknowledged: this value replaces the topic's state.
        self.acked[index] = value
        self.pending[index] = []
        if qos == 2:
            client.send(ack_packet(PUBREL, pid))
            client.expect_ack(PUBCOMP, pid, timeout=5)


def retained_values(port: int, prefix: str) -> dict[str, bytes]:
    """What a new subscriber to ``prefix/#`` gets as retained (a sentinel ends the list)."""
    with raw_connected(port) as sub:
        sub.subscribe([(f"{prefix}/#", 1)])
        with raw_connected(port) as pub:
            pub.publish(f"{prefix}/sentinel", b"end", qos=1)
            pub.disconnect()
        got = collect_until(sub, b"end", timeout=15)
        sub.disconnect()
    return {m.topic: m.payload for m in got if m.retain}


@pytest.mark.timeout(90)
def test_retained_updates_survive_kills(broker_factory: BrokerFactory) -> None:
    rng = random.Random(f"{SEED}-retained")
    broker = broker_factory("--sync", "full", "--store", "sqlite")
    updater = RetainedUpdater(broker.port, unique("cm/ret"), 12, random.Random(rng.random()))
    stop, threads = run_threads(updater.run)
    problems: list[str] = []
    checks: list[tuple[int, int]] = []  # (updates before the kill, topics checked)
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(*KILL_AFTER))
            before = updater.updates
            broker.kill()
            updater.hold.set()
            broker.start()
            assert wait_for(updater.parked.is_set, 10), "the updater did not park"
            found = retained_values(broker.port, updater.prefix)
            for index in range(updater.topics):
                topic = updater.topic(index)
                allowed = [updater.acked.get(index), *updater.pending.get(index, [])]
                value = found.get(topic)
                if value not in allowed:
                    problems.append(
                        f"after kill {len(checks) + 1}: {topic} = {value!r}, expected one of "
                        f"{allowed!r} (last acknowledged first)"
                    )
            checks.append((before, len(found)))
            updater.hold.clear()
    finally:
        stop_threads(stop, threads)
    assert not updater.errors, updater.errors
    assert any(n > 0 for n, _ in checks), checks
    if problems:
        pytest.fail("\n".join([*problems, f"checks: {checks}"]), pytrace=False)


# ---------------------------------------------------------------------------------------------
# Scenario: a Spark journal read while the broker is killed
# ---------------------------------------------------------------------------------------------


@dataclass
class SparkReads:
    """Reads the journal with Spark in a loop, back to back; records each read's time span
    and its seqs or its error."""

    spark: Any
    data_dir: Path
    results: list[tuple[float, float, list[int] | str]] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        from telemq.pipeline.source import read_journal

        while not stop.is_set():
            began = time.monotonic()
            outcome: list[int] | str
            try:
                rows = read_journal(self.spark, str(self.data_dir)).select("seq").collect()
                outcome = [int(r[0]) for r in rows]
            except Exception as exc:  # a clean failure: an exception, not a hang
                outcome = f"{type(exc).__name__}: {str(exc)[:300]}"
            self.results.append((began, time.monotonic(), outcome))


@pytest.mark.spark
@pytest.mark.timeout(150)
def test_spark_journal_read_while_the_broker_is_killed(
    broker_factory: BrokerFactory, spark: Any
) -> None:
    rng = random.Random(f"{SEED}-spark")
    broker = broker_factory("--sync", "full", "--store", "sqlite")
    topic = unique("cm/spark/")
    publisher = OneShotPublisher(broker.port, topic, 2, total=2000, pace=500.0)
    reads = SparkReads(spark, broker.data_dir)
    from telemq.pipeline.source import read_journal

    # One read first: the Spark session is warm before the kills start.
    read_journal(spark, str(broker.data_dir)).count()
    stop, threads = run_threads(publisher.run, reads.run)
    killed_at: list[float] = []

    def progress() -> int:
        killed_at.append(time.monotonic())
        return len(publisher.acked)

    try:
        kills = kill_repeatedly(broker, rng, progress)
        finished = wait_for(lambda: publisher.done or bool(publisher.errors), SCENARIO_DEADLINE)
    finally:
        stop_threads(stop, threads)
    assert finished and not publisher.errors, publisher.errors
    assert_kills_hit(kills, publisher.total)

    failures = [r for _, _, r in reads.results if isinstance(r, str)]
    snapshots = [r for _, _, r in reads.results if isinstance(r, list)]
    hit = [t for t in killed_at if any(a < t < b for a, b, _ in reads.results)]
    print(
        f"\nSpark reads during the kills: {len(snapshots)} returned rows, "
        f"{len(failures)} failed cleanly {failures[:3]}; {len(hit)} of {len(killed_at)} kills "
        "landed inside a read"
    )
    assert hit, "no kill landed inside a Spark read"
    for seqs in snapshots:
        if seqs:
            assert_contiguous(sorted(seqs))
            assert len(set(seqs)) == len(seqs)

    # After the restart: the whole journal read by Spark is contiguous, with every
    # acknowledged publication exactly once.
    rows = read_journal(spark, str(broker.data_dir)).select("seq", "topic", "payload").collect()
    assert_contiguous(sorted(int(r["seq"]) for r in rows))
    journaled = Counter(bytes(r["payload"]) for r in rows if r["topic"] == topic)
    missing = sorted(n for n in publisher.acked if journaled[OneShotPublisher.payload(n)] == 0)
    twice = sorted(p.decode() for p, c in journaled.items() if c > 1)
    assert not missing, f"acknowledged but not journaled: {missing[:20]}; kills {kills}"
    assert not twice, f"journaled more than once: {twice[:20]}"
