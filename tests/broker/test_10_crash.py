"""Crash tests: QoS 1 at-least-once and QoS 2 exactly-once across SIGKILL of the broker.

First a few deterministic cases (one message, one kill at a known point of the flow), then the
randomised crash test.

The randomised test's setup: one broker (SQLite store, ``sync = full``) on a fixed port and
data dir.

* A persistent **subscriber** (raw client, clean session 0) subscribes to ``crash/q1`` at QoS 1
  and ``crash/q2`` at QoS 2 before anything is published. It acknowledges everything
  (PUBACK; PUBREC/PUBCOMP) and, as the QoS 2 receiver, delivers a message to the application
  on the first PUBLISH of a packet id and remembers the id until the PUBREL (MQTT's
  "method B"), so the broker's legitimate DUP resends are not counted twice. The received
  list is kept across reconnects.
* A persistent **publisher** (raw client, clean session 0) sends 2,000 QoS 1 messages to
  ``crash/q1`` and 2,000 QoS 2 messages to ``crash/q2``, interleaved, payload
  ``q<qos>:<seq>``, with a window of in-flight messages. It records every PUBACK (QoS 1) and
  PUBREC (QoS 2), and on every reconnect resends what is unacknowledged, in order: PUBLISH
  with DUP=1, or PUBREL for QoS 2 messages already PUBREC'd.
* Meanwhile the broker is SIGKILLed and restarted, 4 times, each 0.2-1.5 s (seeded random)
  after it became ready. Both clients reconnect on their own.

At the end (120 s deadline in all): every message whose PUBACK/PUBREC the publisher saw has
been delivered to the subscriber at least once, no QoS 2 message was delivered twice, and the
publisher completed all 4,000.

The randomised test runs twice: at MQTT 3.1.1, and at MQTT 5.0 with persistent sessions made
by a Session Expiry Interval of an hour. At 5.0 every PUBLISH carries a User Property naming
its seq, and the subscriber checks that each delivery still carries its own: the properties
are stored with the messages and survive the kills.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from telemq.protocol import (
    ConnAck,
    Connect,
    Properties,
    Publish,
    Subscribe,
    decode_packet,
    encode,
)

from .helpers import (
    DISCONNECT_BYTES,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    BrokerProcess,
    Connack,
    ConnectionClosed,
    Packet,
    RawClient,
    ack_packet,
    collect_until,
    connect_packet,
    fixed,
    parse_connack,
    parse_publish,
    publish_packet,
    subscribe_packet,
    unique,
)
from .helpers import Publish as ParsedPublish

pytestmark = [pytest.mark.interop]

N_PER_QOS = 2000
KILLS = 4
SEED = 20240611
WINDOW = 50
TOTAL_DEADLINE = 120.0
STALL = 15.0
# The publisher is paced (messages per second, both streams together) so that the stream
# lasts longer than the kill schedule even against a fast broker.
PACE = 300.0


MQTT5 = 5
SESSION_EXPIRY = 3600  # seconds: the 5.0 sessions outlive every kill


def _connect(port: int, client_id: str, version: int = 4) -> tuple[RawClient, int]:
    """Connect with clean session 0 (at 5.0: Clean Start 0 and a Session Expiry Interval);
    returns the client and the session-present flag."""
    client = RawClient(port, timeout=2.0)
    try:
        # Keep alive 0: the subscriber may sit idle while the test waits for a message.
        if version == MQTT5:
            props = Properties(session_expiry_interval=SESSION_EXPIRY)
            client.send(
                encode(
                    Connect(client_id, MQTT5, clean_session=False, keepalive=0, properties=props)
                )
            )
            p = client.recv_packet(5.0)
            ack5 = decode_packet(fixed(p.type << 4 | p.flags, p.body), MQTT5, mqtt5=True)
            assert isinstance(ack5, ConnAck), ack5
            ack = Connack(int(ack5.session_present), ack5.return_code)
        else:
            client.send(connect_packet(client_id, clean=False, keepalive=0))
            ack = parse_connack(client.recv_packet(5.0))
    except BaseException:
        client.close()
        raise
    if ack.return_code != 0:
        client.close()
        raise ConnectionClosed(f"CONNACK {ack.return_code}")
    return client, ack.session_present


def _reconnect(
    port: int, client_id: str, stop: threading.Event, version: int
) -> tuple[RawClient, int] | None:
    while not stop.is_set():
        try:
            return _connect(port, client_id, version)
        except (OSError, ConnectionClosed, TimeoutError, AssertionError):
            time.sleep(0.05)
    return None


def _subscribe(version: int) -> bytes:
    if version == MQTT5:
        return encode(Subscribe(1, [("crash/q1", 1), ("crash/q2", 2)]), MQTT5)
    return subscribe_packet(1, [("crash/q1", 1), ("crash/q2", 2)])


def _publish(version: int, msg: Message, pid: int, dup: bool = False) -> bytes:
    if version == MQTT5:
        props = Properties(user_properties=[("seq", str(msg.seq))])
        return encode(Publish(msg.topic, msg.payload, msg.qos, False, dup, pid, None, props), 5)
    return publish_packet(msg.topic, msg.payload, qos=msg.qos, pid=pid, dup=dup)


def _parse_publish(version: int, p: Packet) -> tuple[ParsedPublish, str | None]:
    """The PUBLISH, and at 5.0 the seq its User Property names."""
    if version != MQTT5:
        return parse_publish(p), None
    publish = decode_packet(fixed(p.type << 4 | p.flags, p.body), MQTT5, mqtt5=True)
    assert isinstance(publish, Publish), publish
    props = publish.properties
    seq = dict(props.user_properties).get("seq") if props is not None else None
    parsed = ParsedPublish(
        publish.topic, publish.payload, publish.qos, publish.retain, publish.dup, publish.packet_id
    )
    return parsed, seq


@dataclass
class Subscriber:
    port: int
    version: int = 4
    client_id: str = "crash-sub"
    received_q1: list[int] = field(default_factory=list)
    received_q2: list[int] = field(default_factory=list)
    unreleased: set[int] = field(default_factory=set)  # QoS 2 ids seen, PUBREL pending
    # For the failure report: QoS 2 packets in arrival order as (connection, what, packet id,
    # seq or -1), and why each connection ended.
    q2_events: list[tuple[int, str, int, int]] = field(default_factory=list)
    ends: list[str] = field(default_factory=list)
    sessions_lost: int = 0
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def subscribe_once(self) -> None:
        client, _ = _connect(self.port, self.client_id, self.version)
        with client:
            client.send(_subscribe(self.version))
            p = client.recv_packet()
            codes = p.body[3:] if self.version == MQTT5 else p.body[2:]  # 5.0: properties
            assert p.type == SUBACK and list(codes) == [1, 2], p
            client.send(DISCONNECT_BYTES)

    def explain(self, seq: int) -> str:
        """The subscriber's view of one QoS 2 message: the last packets for the packet ids
        it came with (we answer PUBLISH with PUBREC, PUBREL with PUBCOMP)."""
        pids = {pid for _, _, pid, s in self.q2_events if s == seq}
        if not pids:
            return f"  seq {seq}: never received"
        last = max(i for i, (_, _, _, s) in enumerate(self.q2_events) if s == seq)
        events = [
            f"conn{conn} {what} id={pid}"
            for conn, what, pid, _ in self.q2_events[: last + 3]
            if pid in pids
        ]
        return f"  seq {seq}: " + "; ".join(events[-8:])

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            conn = _reconnect(self.port, self.client_id, stop, self.version)
            if conn is None:
                return
            client, present = conn
            self.connections += 1
            if not present:
                self.sessions_lost += 1
                # Keep the test going so the report shows what was lost.
                client.send(_subscribe(self.version))
            try:
                self._pump(client, stop)
            except (OSError, ConnectionClosed) as exc:
                self.ends.append(f"conn{self.connections}: {exc!r}")
            except AssertionError as exc:
                self.errors.append(str(exc))
                return
            finally:
                client.close()

    def _pump(self, client: RawClient, stop: threading.Event) -> None:
        while not stop.is_set():
            p = client.try_recv_packet(0.2)
            if p is None:
                continue
            if p.type == PUBLISH:
                msg, property_seq = _parse_publish(self.version, p)
                assert msg.pid not in (None, 0), f"PUBLISH with packet id {msg.pid}"
                assert msg.pid is not None
                qos_tag, seq = msg.payload.decode().split(":")
                if self.version == MQTT5:
                    assert property_seq == seq, f"seq {seq} came with property {property_seq}"
                with self.lock:
                    if msg.qos == 1:
                        self.received_q1.append(int(seq))
                        client.send(ack_packet(PUBACK, msg.pid))
                    elif msg.qos == 2:
                        known = msg.pid in self.unreleased
                        what = f"PUBLISH(dup={int(msg.dup)}, seq={seq}{', id known' * known})"
                        self.q2_events.append((self.connections, what, msg.pid, int(seq)))
                        if not known:
                            self.unreleased.add(msg.pid)
                            self.received_q2.append(int(seq))
                        client.send(ack_packet(PUBREC, msg.pid))
                    else:
                        raise AssertionError(f"unexpected QoS 0 delivery {msg!r}")
                assert (qos_tag, msg.qos) in (("q1", 1), ("q2", 2)), msg
            elif p.type == PUBREL:
                with self.lock:
                    self.q2_events.append((self.connections, "PUBREL", p.pid, -1))
                    self.unreleased.discard(p.pid)
                client.send(ack_packet(PUBCOMP, p.pid))
            elif p.type == SUBACK:  # of a re-subscription after a lost session
                continue
            else:
                raise AssertionError(f"unexpected packet {p!r}")


@dataclass
class Message:
    qos: int
    seq: int

    @property
    def topic(self) -> str:
        return f"crash/q{self.qos}"

    @property
    def payload(self) -> bytes:
        return f"q{self.qos}:{self.seq}".encode()


@dataclass
class Publisher:
    port: int
    version: int = 4
    client_id: str = "crash-pub"
    acked_q1: set[int] = field(default_factory=set)  # PUBACK seen
    acked_q2: set[int] = field(default_factory=set)  # PUBREC seen
    completed: int = 0
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    # In flight, in send order: packet id -> (message, "publish" | "pubrel").
    inflight: dict[int, tuple[Message, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        todo = []
        for seq in range(N_PER_QOS):
            todo += [Message(1, seq), Message(2, seq)]
        self.todo = todo
        self.next_index = 0
        self.next_pid = 0

    @property
    def done(self) -> bool:
        return self.completed == len(self.todo)

    def _pid(self) -> int:
        while True:
            self.next_pid = self.next_pid % 65535 + 1
            if self.next_pid not in self.inflight:
                return self.next_pid

    def run(self, stop: threading.Event) -> None:
        start = time.monotonic()
        while not stop.is_set() and not self.done:
            conn = _reconnect(self.port, self.client_id, stop, self.version)
            if conn is None:
                return
            client, _ = conn
            self.connections += 1
            try:
                # Resend everything unacknowledged, in the original order.
                for pid, (msg, stage) in list(self.inflight.items()):
                    if stage == "publish":
                        client.send(_publish(self.version, msg, pid, dup=True))
                    else:
                        client.send(ack_packet(PUBREL, pid))
                self._pump(client, stop, start)
                if self.done:
                    client.send(DISCONNECT_BYTES)
            except (OSError, ConnectionClosed):
                pass
            except AssertionError as exc:
                self.errors.append(str(exc))
                return
            finally:
                client.close()

    def _pump(self, client: RawClient, stop: threading.Event, start: float) -> None:
        while not stop.is_set() and not self.done:
            # Fill the window, at the paced rate.
            allowed = int((time.monotonic() - start) * PACE) + WINDOW
            while (
                len(self.inflight) < WINDOW
                and self.next_index < len(self.todo)
                and self.next_index < allowed
            ):
                msg = self.todo[self.next_index]
                self.next_index += 1
                pid = self._pid()
                self.inflight[pid] = (msg, "publish")
                client.send(_publish(self.version, msg, pid))
            p = client.try_recv_packet(0.01)
            while p is not None:
                self._on_packet(client, p)
                p = client.try_recv_packet(0)

    def _on_packet(self, client: RawClient, p: Packet) -> None:
        entry = self.inflight.get(p.pid) if p.type in (PUBACK, PUBREC, PUBCOMP) else None
        if p.type == PUBACK:
            assert entry is not None and entry[0].qos == 1, f"PUBACK for unknown id {p.pid}"
            self.acked_q1.add(entry[0].seq)
            del self.inflight[p.pid]
            self.completed += 1
        elif p.type == PUBREC:
            assert entry is not None and entry[0].qos == 2, f"PUBREC for unknown id {p.pid}"
            self.acked_q2.add(entry[0].seq)
            self.inflight[p.pid] = (entry[0], "pubrel")
            client.send(ack_packet(PUBREL, p.pid))
        elif p.type == PUBCOMP:
            # A PUBCOMP may repeat after a resent PUBREL; only the first one completes.
            if entry is not None and entry[1] == "pubrel":
                del self.inflight[p.pid]
                self.completed += 1
        else:
            raise AssertionError(f"publisher got unexpected {p!r}")


@pytest.mark.timeout(TOTAL_DEADLINE + 60)
@pytest.mark.parametrize("version", [4, MQTT5], ids=["mqtt311", "mqtt5"])
def test_qos1_at_least_once_and_qos2_exactly_once_across_sigkill(
    broker_factory: Callable[..., BrokerProcess], version: int
) -> None:
    rng = random.Random(SEED + version)
    broker = broker_factory("--sync", "full", "--store", "sqlite")
    deadline = time.monotonic() + TOTAL_DEADLINE

    sub = Subscriber(broker.port, version)
    sub.subscribe_once()
    pub = Publisher(broker.port, version)
    stop = threading.Event()
    threads = [
        threading.Thread(target=sub.run, args=(stop,), name="crash-sub", daemon=True),
        threading.Thread(target=pub.run, args=(stop,), name="crash-pub", daemon=True),
    ]
    for t in threads:
        t.start()

    kills: list[tuple[float, int, int]] = []  # (delay, acked before kill, completed before)
    try:
        for _ in range(KILLS):
            delay = rng.uniform(0.2, 1.5)
            time.sleep(delay)
            kills.append((round(delay, 3), len(pub.acked_q1) + len(pub.acked_q2), pub.completed))
            broker.kill()
            broker.start()

        def finished() -> bool:
            with sub.lock:
                have_q1 = set(sub.received_q1)
                have_q2 = set(sub.received_q2)
            return pub.done and pub.acked_q1 <= have_q1 and pub.acked_q2 <= have_q2

        # Wait for the end, but give up early once the publisher is done and nothing has
        # arrived for STALL seconds (a lost message would otherwise hold the full deadline).
        progress = (-1, time.monotonic())
        while time.monotonic() < deadline and not finished():
            if pub.errors or sub.errors:
                break
            count = len(sub.received_q1) + len(sub.received_q2)
            if count != progress[0]:
                progress = (count, time.monotonic())
            elif pub.done and time.monotonic() - progress[1] > STALL:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(10)

    with sub.lock:
        received_q1 = list(sub.received_q1)
        received_q2 = list(sub.received_q2)
    summary = (
        f"kills (delay s, acked before, completed before): {kills}; "
        f"publisher: {pub.completed}/{len(pub.todo)} completed, {len(pub.acked_q1)} PUBACKs, "
        f"{len(pub.acked_q2)} PUBRECs, {pub.connections} connections, errors {pub.errors}; "
        f"subscriber: {len(received_q1)} QoS 1 / {len(received_q2)} QoS 2 deliveries, "
        f"{sub.connections} connections (ends: {sub.ends}), sessions lost {sub.sessions_lost}, "
        f"errors {sub.errors}"
    )
    assert not pub.errors and not sub.errors, summary
    # The kills must have hit the traffic, or the test proves nothing.
    assert any(0 < completed < len(pub.todo) for _, _, completed in kills), summary

    problems: list[str] = []
    missing_q1 = sorted(pub.acked_q1 - set(received_q1))
    if missing_q1:
        problems.append(f"QoS 1 PUBACK'd but never delivered: {missing_q1[:20]}")
    missing_q2 = sorted(pub.acked_q2 - set(received_q2))
    if missing_q2:
        problems.append(
            "QoS 2 PUBREC'd but never delivered:\n"
            + "\n".join(sub.explain(seq) for seq in missing_q2[:10])
        )
    twice = sorted(seq for seq, n in Counter(received_q2).items() if n > 1)
    if twice:
        problems.append(
            "QoS 2 delivered more than once:\n" + "\n".join(sub.explain(seq) for seq in twice[:10])
        )
    if sub.sessions_lost:
        problems.append(f"the subscriber's session was lost {sub.sessions_lost} time(s)")
    if not pub.done:
        problems.append(f"the publisher did not finish within {TOTAL_DEADLINE} s")
    stray = sorted({s for s in received_q1 + received_q2 if not 0 <= s < N_PER_QOS})
    if stray:
        problems.append(f"payloads that were never published: {stray[:20]}")
    # Per-stream order is not asserted: redelivery after a crash may legitimately interleave.
    if problems:
        pytest.fail("\n".join([*problems, summary]), pytrace=False)


# ---------------------------------------------------------------------------------------------
# Deterministic cases
# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("qos", [1, 2])
def test_unacked_delivery_resent_after_crash(
    broker_factory: Callable[..., BrokerProcess], raw_factory: Callable[..., RawClient], qos: int
) -> None:
    """Subscriber gets PUBLISH(id=P) and does not answer; SIGKILL; restart; reconnect ->
    the message comes again. For QoS 2 it must be the same packet id P with DUP=1: the
    receiver has already passed the message on at the first PUBLISH and recognises the resend
    only by its packet id. (Three QoS 1 messages are acknowledged first so that P is not the
    first id a restarted broker would hand out anyway.)"""
    broker = broker_factory()
    cid = unique("crs")
    topic = unique("crs/")
    sub = raw_factory(broker.port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, qos)])
    pub = raw_factory(broker.port, connected=True)
    for i in range(3):
        pub.publish(topic, b"warm-up %d" % i, qos=1)
    assert [m.payload for m in sub.collect(3)] == [b"warm-up %d" % i for i in range(3)]
    pub.publish(topic, b"unacked", qos=qos)
    first = sub.expect_publish()
    assert (first.payload, first.qos) == (b"unacked", qos)
    broker.kill()
    assert sub.wait_closed()
    broker.start()
    sub = raw_factory(broker.port)
    assert sub.connect(cid, clean=False).session_present == 1
    again = sub.expect_publish()
    assert (again.payload, again.qos) == (b"unacked", qos)
    if qos == 2:
        assert (again.pid, again.dup) == (first.pid, True), (first, again)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM"])
def test_pubrel_not_publish_after_restart_once_pubrec_was_answered(
    broker_factory: Callable[..., BrokerProcess], raw_factory: Callable[..., RawClient], stop: str
) -> None:
    """Subscriber: PUBLISH(id=P) -> PUBREC(P) -> PUBREL(P) received; the broker is killed
    (or stopped) before our PUBCOMP; restart; reconnect -> the broker continues with PUBREL(P).
    It must not send the PUBLISH again: a sender that has sent PUBREL never resends the
    PUBLISH [MQTT-4.3.3-1], and our receiver has released P, so a resent PUBLISH would be a
    second delivery."""
    broker = broker_factory()
    cid = unique("rel")
    topic = unique("rel/")
    sub = raw_factory(broker.port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 2)])
    pub = raw_factory(broker.port, connected=True)
    pub.publish(topic, b"once", qos=2)
    msg = sub.expect_publish()
    assert msg.pid is not None
    sub.send(ack_packet(PUBREC, msg.pid))
    sub.expect_ack(PUBREL, msg.pid)
    if stop == "SIGKILL":
        broker.kill()
    else:
        assert broker.stop() == 0
    broker.start()
    sub = raw_factory(broker.port)
    assert sub.connect(cid, clean=False).session_present == 1
    p = sub.recv_packet()
    assert (p.type, p.pid) == (PUBREL, msg.pid), f"expected PUBREL {msg.pid}, got {p!r}"
    sub.send(ack_packet(PUBCOMP, msg.pid))
    pub = raw_factory(broker.port, connected=True)
    pub.publish(topic, b"sentinel", qos=2)
    assert [m.payload for m in collect_until(sub, b"sentinel")] == [b"sentinel"]


@pytest.mark.timeout(60)
def test_inbound_qos2_resend_after_crash_is_not_delivered_twice(
    broker_factory: Callable[..., BrokerProcess], raw_factory: Callable[..., RawClient]
) -> None:
    """Publisher: PUBLISH(QoS 2, id=7) -> PUBREC(7); SIGKILL; restart; the publisher
    reconnects (clean session 0) and, not knowing whether its PUBREL would have arrived,
    resends PUBLISH(DUP=1, id=7) -> PUBREC(7) -> PUBREL(7) -> PUBCOMP(7). The persistent
    subscriber gets the message exactly once."""
    broker = broker_factory()
    sub_id, pub_id = unique("in2s"), unique("in2p")
    topic = unique("in2/")
    sub = raw_factory(broker.port, connected=True, client_id=sub_id, clean=False)
    sub.subscribe([(topic, 2)])
    sub.disconnect()
    pub = raw_factory(broker.port, connected=True, client_id=pub_id, clean=False)
    pub.send(publish_packet(topic, b"exactly once", qos=2, pid=7))
    pub.expect_ack(PUBREC, 7)
    broker.kill()
    broker.start()
    pub = raw_factory(broker.port)
    assert pub.connect(pub_id, clean=False).session_present == 1
    pub.send(publish_packet(topic, b"exactly once", qos=2, pid=7, dup=True))
    pub.expect_ack(PUBREC, 7)
    pub.send(ack_packet(PUBREL, 7))
    pub.expect_ack(PUBCOMP, 7)
    pub.publish(topic, b"sentinel", qos=2)
    sub = raw_factory(broker.port)
    assert sub.connect(sub_id, clean=False).session_present == 1
    got = collect_until(sub, b"sentinel")
    assert [m.payload for m in got] == [b"exactly once", b"sentinel"]


@pytest.mark.timeout(60)
def test_acked_publications_survive_crash(
    broker_factory: Callable[..., BrokerProcess], raw_factory: Callable[..., RawClient]
) -> None:
    """Everything PUBACK'd / PUBREC'd is durable: 50 QoS 1 and 50 QoS 2 messages for an
    offline persistent subscriber, SIGKILL right after the last ack, all delivered after the
    restart (in order per QoS)."""
    broker = broker_factory()
    cid = unique("dur")
    prefix = unique("dur")
    sub = raw_factory(broker.port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(f"{prefix}/1", 1), (f"{prefix}/2", 2)])
    sub.disconnect()
    pub = raw_factory(broker.port, connected=True)
    for i in range(50):
        pub.publish(f"{prefix}/1", f"{i}".encode(), qos=1)
        pub.send(publish_packet(f"{prefix}/2", f"{i}".encode(), qos=2, pid=1000 + i))
        pub.expect_ack(PUBREC, 1000 + i)
    broker.kill()
    broker.start()
    sub = raw_factory(broker.port)
    assert sub.connect(cid, clean=False).session_present == 1
    got = sub.collect(100, timeout=20)
    for qos in (1, 2):
        payloads = [int(m.payload) for m in got if m.topic == f"{prefix}/{qos}"]
        assert payloads == list(range(50)), (qos, payloads)
