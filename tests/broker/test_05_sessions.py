"""Persistent sessions (clean session = 0): offline queue, redelivery with DUP, restarts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import (
    MQTT31,
    MQTT311,
    PUBACK,
    PUBCOMP,
    PUBREC,
    PUBREL,
    BrokerProcess,
    PahoClient,
    RawClient,
    ack_packet,
    collect_until,
    publish_packet,
    unique,
    write_config,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]
PahoMaker = Callable[..., PahoClient]
VERSIONS = pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])


@VERSIONS
def test_offline_queue_delivers_qos1_and_qos2_not_qos0(
    port: int, paho_factory: PahoMaker, paho_client: PahoMaker, version: int
) -> None:
    cid = unique("off")
    topic = unique("off/")
    sub = paho_factory(port, cid, version=version, clean=False)
    sub.connect()
    sub.subscribe(topic, 2)
    sub.disconnect()
    pub = paho_client(port)
    pub.publish(topic, b"q0", qos=0)
    pub.publish(topic, b"q1", qos=1)
    pub.publish(topic, b"q2", qos=2)
    again = paho_factory(port, cid, version=version, clean=False)
    present = again.connect()
    if version == MQTT311:
        assert present is True
    got = again.wait_messages(2)
    assert [(m.payload, m.qos) for m in got] == [(b"q1", 1), (b"q2", 2)]
    # The subscription is still there without re-subscribing; QoS 0 flows when online.
    pub.publish(topic, b"live q0", qos=0)
    pub.publish(topic, b"sentinel", qos=1)
    got = again.wait_messages(4)
    assert [m.payload for m in got[2:]] == [b"live q0", b"sentinel"]


def test_offline_queue_keeps_order(port: int, raw_factory: RawFactory) -> None:
    cid = unique("ord")
    topic = unique("ord/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 1)])
    sub.disconnect()
    pub = raw_factory(port, connected=True)
    for i in range(100):
        pub.publish(topic, str(i).encode(), qos=1 + i % 2)
    sub = raw_factory(port)
    assert sub.connect(cid, clean=False).session_present == 1
    got = sub.collect(100)
    assert [int(m.payload) for m in got] == list(range(100))
    assert {m.qos for m in got} == {1}


def test_clean_session_discards_subscriptions(port: int, raw_factory: RawFactory) -> None:
    cid = unique("cl")
    topic = unique("cl/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 1)])
    sub.disconnect()
    clean = raw_factory(port)
    assert clean.connect(cid, clean=True).session_present == 0
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"nobody", qos=1)
    # Subscribe to a sentinel topic only: a left-over subscription would deliver "nobody".
    sentinel_topic = unique("cls/")
    clean.subscribe([(sentinel_topic, 1)])
    pub.publish(topic, b"still nobody", qos=1)
    pub.publish(sentinel_topic, b"sentinel", qos=1)
    assert [m.payload for m in collect_until(clean, b"sentinel")] == [b"sentinel"]
    clean.disconnect()
    # Clean session 1 ended the old session: a new persistent one starts empty.
    again = raw_factory(port)
    assert again.connect(cid, clean=False).session_present == 0


def test_clean_session_client_gets_no_offline_messages(port: int, raw_factory: RawFactory) -> None:
    cid = unique("cq")
    topic = unique("cq/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=True)
    sub.subscribe([(topic, 1)])
    sub.disconnect()
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"lost", qos=1)
    sub = raw_factory(port, connected=True, client_id=cid, clean=True)
    sub.subscribe([(topic, 1)])
    pub.publish(topic, b"sentinel", qos=1)
    assert [m.payload for m in collect_until(sub, b"sentinel")] == [b"sentinel"]


@pytest.mark.parametrize("qos", [1, 2])
def test_unacked_publish_resent_with_dup_on_reconnect(
    port: int, raw_factory: RawFactory, qos: int
) -> None:
    """[MQTT-4.4.0-1]: a persistent session's unacknowledged PUBLISH is sent again, same
    message, DUP=1, after the client reconnects; the packet id is never 0."""
    cid = unique("dup")
    topic = unique("dup/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False)
    assert sub.subscribe([(topic, qos)]) == [qos]
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"ack me", qos=qos)
    first = sub.expect_publish()
    assert (first.payload, first.qos, first.dup) == (b"ack me", qos, False)
    assert first.pid not in (None, 0)
    sub.disconnect()  # without acknowledging
    sub = raw_factory(port)
    assert sub.connect(cid, clean=False).session_present == 1
    again = sub.expect_publish()
    assert (again.topic, again.payload, again.qos, again.dup) == (topic, b"ack me", qos, True)
    assert again.pid not in (None, 0)
    # Now acknowledge properly; nothing more is resent on the next reconnect.
    assert again.pid is not None
    if qos == 1:
        sub.send(ack_packet(PUBACK, again.pid))
    else:
        sub.send(ack_packet(PUBREC, again.pid))
        sub.expect_ack(PUBREL, again.pid)
        sub.send(ack_packet(PUBCOMP, again.pid))
    assert sub.is_open()
    sub.disconnect()
    sub = raw_factory(port)
    assert sub.connect(cid, clean=False).session_present == 1
    pub.publish(topic, b"sentinel", qos=1)
    assert [m.payload for m in collect_until(sub, b"sentinel")] == [b"sentinel"]


def test_pubrel_resent_on_reconnect(port: int, raw_factory: RawFactory) -> None:
    """QoS 2 outbound: PUBREC sent, PUBREL received, PUBCOMP not sent -> after reconnect the
    server sends PUBREL again (not the PUBLISH)."""
    cid = unique("rel")
    topic = unique("rel/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 2)])
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"x", qos=2)
    msg = sub.expect_publish()
    assert msg.pid is not None
    sub.send(ack_packet(PUBREC, msg.pid))
    sub.expect_ack(PUBREL, msg.pid)
    sub.disconnect()
    sub = raw_factory(port)
    assert sub.connect(cid, clean=False).session_present == 1
    p = sub.recv_packet()
    assert p.type == PUBREL and p.pid == msg.pid, p
    assert p.flags == 0x02
    sub.send(ack_packet(PUBCOMP, msg.pid))
    pub.publish(topic, b"sentinel", qos=2)
    assert [m.payload for m in collect_until(sub, b"sentinel")] == [b"sentinel"]


def test_inbound_qos2_completed_after_reconnect_is_delivered_once(
    port: int, raw_factory: RawFactory
) -> None:
    """Publisher: PUBLISH QoS 2 -> PUBREC, connection lost, reconnect (clean 0), PUBREL ->
    PUBCOMP. Subscriber gets exactly one copy."""
    topic = unique("in2/")
    watch = raw_factory(port, connected=True)
    watch.subscribe([(topic, 2)])
    cid = unique("in2p")
    pub = raw_factory(port, connected=True, client_id=cid, clean=False)
    pub.send(publish_packet(topic, b"exactly once", qos=2, pid=33))
    pub.expect_ack(PUBREC, 33)
    pub.close()
    pub = raw_factory(port)
    assert pub.connect(cid, clean=False).session_present == 1
    # Resending the PUBLISH with DUP before the PUBREL is legal too and must not duplicate.
    pub.send(publish_packet(topic, b"exactly once", qos=2, pid=33, dup=True))
    pub.expect_ack(PUBREC, 33)
    pub.send(ack_packet(PUBREL, 33))
    pub.expect_ack(PUBCOMP, 33)
    pub.publish(topic, b"sentinel", qos=2)
    got = collect_until(watch, b"sentinel")
    assert [m.payload for m in got] == [b"exactly once", b"sentinel"]


def test_unsubscribe_in_persistent_session_is_kept(port: int, raw_factory: RawFactory) -> None:
    cid = unique("uns")
    prefix = unique("uns")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(f"{prefix}/a", 1), (f"{prefix}/b", 1)])
    sub.unsubscribe([f"{prefix}/a"])
    sub.disconnect()
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/a", b"no", qos=1)
    pub.publish(f"{prefix}/b", b"yes", qos=1)
    sub = raw_factory(port)
    assert sub.connect(cid, clean=False).session_present == 1
    pub.publish(f"{prefix}/b", b"sentinel", qos=1)
    assert [m.payload for m in collect_until(sub, b"sentinel")] == [b"yes", b"sentinel"]


def test_offline_messages_delivered_at_granted_qos(port: int, raw_factory: RawFactory) -> None:
    cid = unique("gq")
    topic = unique("gq/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 1)])
    sub.disconnect()
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"two", qos=2)
    sub = raw_factory(port)
    sub.connect(cid, clean=False)
    (msg,) = sub.collect(1)
    assert (msg.payload, msg.qos) == (b"two", 1)


@pytest.mark.timeout(90)
def test_session_and_queue_survive_restart_and_crash(
    broker_factory: Callable[..., BrokerProcess], raw_factory: RawFactory
) -> None:
    broker = broker_factory()
    cid = unique("dur")
    topic = unique("dur/")
    sub = raw_factory(broker.port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 2)])
    sub.disconnect()
    pub = raw_factory(broker.port, connected=True)
    pub.publish(topic, b"queued before restart", qos=1)
    assert broker.stop() == 0
    broker.start()
    pub = raw_factory(broker.port, connected=True)
    pub.publish(topic, b"queued before crash", qos=2)
    broker.kill()
    broker.start()
    sub = raw_factory(broker.port)
    assert sub.connect(cid, clean=False).session_present == 1
    got = sub.collect(2)
    assert [(m.payload, m.qos) for m in got] == [
        (b"queued before restart", 1),
        (b"queued before crash", 2),
    ]


@pytest.mark.timeout(90)
def test_offline_queue_limit_drops_and_counts(
    broker_factory: Callable[..., BrokerProcess], raw_factory: RawFactory, tmp_path: Path
) -> None:
    """max_queued_messages bounds an offline session's queue; the excess is dropped (counted
    in $SYS/broker/messages/dropped), and what is delivered is still in order."""
    config = write_config(
        tmp_path / "limits.toml",
        "[limits]\nmax_queued_messages = 10\nmax_inflight = 5\n",
    )
    broker = broker_factory("--sys-interval", "1", config=config)
    cid = unique("lim")
    topic = unique("lim/")
    sub = raw_factory(broker.port, connected=True, client_id=cid, clean=False)
    sub.subscribe([(topic, 1)])
    sub.disconnect()
    pub = raw_factory(broker.port, connected=True)
    for i in range(40):
        pub.publish(topic, str(i).encode(), qos=1)
    sub = raw_factory(broker.port)
    assert sub.connect(cid, clean=False).session_present == 1
    pub.publish(topic, b"sentinel", qos=1)
    got = [m.payload for m in collect_until(sub, b"sentinel")][:-1]
    # Offline, nothing is in flight: the queue holds exactly the first 10, the 30 after
    # them are dropped.
    assert [int(p) for p in got] == list(range(10))
    watch = raw_factory(broker.port, connected=True)
    watch.subscribe([("$SYS/broker/messages/dropped", 0)])
    # The counter is refreshed every second: wait for a value that includes the drops.
    dropped = int(watch.collect(1, timeout=15)[0].payload)
    while dropped < 30:
        dropped = int(watch.collect(1, timeout=15)[0].payload)
    assert dropped == 30


def test_persistent_session_parameters_can_change(port: int, raw_factory: RawFactory) -> None:
    """The same persistent session used from 3.1 and then 3.1.1 keeps its subscriptions."""
    cid = unique("pv")
    topic = unique("pv/")
    sub = raw_factory(port, connected=True, client_id=cid, clean=False, version=MQTT31)
    sub.subscribe([(topic, 1)])
    sub.disconnect()
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"for you", qos=1)
    sub = raw_factory(port)
    assert sub.connect(cid, clean=False, version=MQTT311).session_present == 1
    (msg,) = sub.collect(1)
    assert msg.payload == b"for you"
