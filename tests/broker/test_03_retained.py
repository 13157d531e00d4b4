"""Retained messages [MQTT-3.3.1-5..12].

Retained messages are sent before anything published later (right after the SUBACK for a clean
session; a persistent session's may come before it); tests that
show a retained message is *absent* publish a live sentinel after subscribing and stop there.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .helpers import (
    DISCONNECT_BYTES,
    MQTT31,
    MQTT311,
    PUBACK,
    PUBLISH,
    SUBACK,
    BrokerProcess,
    PahoClient,
    Publish,
    RawClient,
    ack_packet,
    collect_until,
    parse_publish,
    subscribe_packet,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]
PahoMaker = Callable[..., PahoClient]


def retained_on_subscribe(
    raw_factory: RawFactory, port: int, topic_filter: str, qos: int, sentinel_topic: str
) -> list[tuple[str, bytes, int, bool]]:
    """Subscribe a fresh client; return what arrives before a live sentinel on
    ``sentinel_topic`` (which must match ``topic_filter``)."""
    sub = raw_factory(port, connected=True)
    sub.subscribe([(topic_filter, qos)])
    pub = raw_factory(port, connected=True)
    pub.publish(sentinel_topic, b"sentinel", qos=1)
    got = collect_until(sub, b"sentinel")
    assert (got[-1].retain, got[-1].topic) == (False, sentinel_topic)
    return [(m.topic, m.payload, m.qos, m.retain) for m in got[:-1]]


def _publications_until(client: RawClient, last: bytes) -> list[Publish]:
    """PUBLISH packets (acknowledged) until the one with payload ``last``; a SUBACK on the way
    is skipped, wherever it comes."""
    got: list[Publish] = []
    while not got or got[-1].payload != last:
        packet = client.recv_packet()
        if packet.type == SUBACK:
            continue
        assert packet.type == PUBLISH, packet
        message = parse_publish(packet)
        if message.qos == 1:
            assert message.pid is not None
            client.send(ack_packet(PUBACK, message.pid))
        got.append(message)
    return got


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "persistent"])
def test_publications_racing_a_subscribe_never_overtake_the_retained_one(
    port: int, raw_factory: RawFactory, clean: bool
) -> None:
    """[MQTT-4.6.0-5] and [MQTT-3.3.1-6]: a SUBSCRIBE and a burst of newer publications (every
    other one retained) race in the broker. The subscriber gets the retained message current
    when its subscription was made, then the later ones, in order and each once."""
    topic = unique("race/")
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"000", qos=1, retain=True)
    sub = raw_factory(port, connected=True, clean=clean)
    sub.send(subscribe_packet(1, [(topic, 1)]))
    for number in range(1, 41):
        pub.publish(topic, b"%03d" % number, qos=1, retain=number % 2 == 0, complete=False)
    pub.publish(topic, b"end", qos=1, complete=False)
    got = _publications_until(sub, b"end")
    numbers = [int(m.payload) for m in got[:-1]]
    assert numbers == sorted(set(numbers)), f"out of order or twice: {numbers}"
    assert [m.retain for m in got] == [True] + [False] * (len(got) - 1), got


def test_retained_messages_outlive_a_disconnect_before_the_suback(
    port: int, raw_factory: RawFactory
) -> None:
    """A persistent session that subscribes and leaves at once still gets the retained
    message when it comes back [MQTT-3.3.1-6, MQTT-3.1.2-5]."""
    topic = unique("leave/")
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"kept", qos=1, retain=True)
    client_id = unique("leaver")
    sub = raw_factory(port, connected=True, client_id=client_id, clean=False)
    sub.send(subscribe_packet(1, [(topic, 1)]) + DISCONNECT_BYTES)
    sub.close()
    again = raw_factory(port)
    ack = again.connect(client_id, clean=False)
    assert ack.session_present
    got = _publications_until(again, b"kept")
    assert [(m.topic, m.payload, m.retain) for m in got] == [(topic, b"kept", True)]


@pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])
def test_retained_sent_to_new_subscriber_with_retain_flag(
    port: int, paho_client: PahoMaker, version: int
) -> None:
    topic = unique("ret/")
    pub = paho_client(port, version=version)
    pub.publish(topic, b"last value", qos=1, retain=True)
    sub = paho_client(port, version=version)
    sub.subscribe(topic, 1)
    (msg,) = sub.wait_messages(1)
    assert (msg.payload, msg.retain, msg.qos) == (b"last value", True, 1)
    # Live delivery of a retained publication to an existing subscriber: RETAIN=0.
    pub.publish(topic, b"live", qos=1, retain=True)
    got = sub.wait_messages(2)
    assert (got[1].payload, got[1].retain) == (b"live", False)


def test_only_last_retained_message_is_kept(port: int, raw_factory: RawFactory) -> None:
    prefix = unique("last")
    pub = raw_factory(port, connected=True)
    for i in range(5):
        pub.publish(f"{prefix}/t", f"v{i}".encode(), qos=1, retain=True)
    got = retained_on_subscribe(raw_factory, port, f"{prefix}/#", 1, f"{prefix}/live")
    assert got == [(f"{prefix}/t", b"v4", 1, True)]


def test_qos0_retained_replaces_previous(port: int, raw_factory: RawFactory) -> None:
    prefix = unique("q0r")
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/t", b"old", qos=2, retain=True)
    pub.publish(f"{prefix}/t", b"new", qos=0, retain=True)
    got = retained_on_subscribe(raw_factory, port, f"{prefix}/#", 2, f"{prefix}/live")
    assert got == [(f"{prefix}/t", b"new", 0, True)]


def test_zero_length_retained_deletes_and_is_forwarded(port: int, raw_factory: RawFactory) -> None:
    """[MQTT-3.3.1-10/11]: forwarded normally to current subscribers, deletes the stored one and
    is never stored itself."""
    prefix = unique("del")
    live = raw_factory(port, connected=True)
    live.subscribe([(f"{prefix}/#", 1)])
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/gone", b"v", qos=1, retain=True)
    pub.publish(f"{prefix}/kept", b"k", qos=1, retain=True)
    pub.publish(f"{prefix}/gone", b"", qos=1, retain=True)
    got = live.collect(3)
    assert [(m.topic, m.payload, m.retain) for m in got] == [
        (f"{prefix}/gone", b"v", False),
        (f"{prefix}/kept", b"k", False),
        (f"{prefix}/gone", b"", False),
    ]
    after = retained_on_subscribe(raw_factory, port, f"{prefix}/#", 1, f"{prefix}/live")
    assert after == [(f"{prefix}/kept", b"k", 1, True)]


def test_zero_length_retained_on_empty_topic_is_harmless(
    port: int, raw_factory: RawFactory
) -> None:
    prefix = unique("nil")
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/x", b"", qos=1, retain=True)
    assert retained_on_subscribe(raw_factory, port, f"{prefix}/#", 1, f"{prefix}/live") == []


def test_non_retained_publish_does_not_touch_retained(port: int, raw_factory: RawFactory) -> None:
    """[MQTT-3.3.1-12]."""
    prefix = unique("keep")
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/t", b"retained", qos=1, retain=True)
    pub.publish(f"{prefix}/t", b"not retained", qos=1, retain=False)
    pub.publish(f"{prefix}/t", b"", qos=1, retain=False)
    got = retained_on_subscribe(raw_factory, port, f"{prefix}/#", 1, f"{prefix}/live")
    assert got == [(f"{prefix}/t", b"retained", 1, True)]


@pytest.mark.parametrize(("pub_qos", "sub_qos"), [(2, 0), (2, 1), (1, 2), (0, 2)])
def test_retained_delivered_at_min_qos(
    port: int, raw_factory: RawFactory, pub_qos: int, sub_qos: int
) -> None:
    prefix = unique("rq")
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/t", b"r", qos=pub_qos, retain=True)
    sub = raw_factory(port, connected=True)
    sub.subscribe([(f"{prefix}/t", sub_qos)])
    (msg,) = sub.collect(1)
    assert (msg.payload, msg.retain, msg.qos) == (b"r", True, min(pub_qos, sub_qos))


def test_retained_matched_by_wildcards(port: int, raw_factory: RawFactory) -> None:
    prefix = unique("rw")
    pub = raw_factory(port, connected=True)
    topics = [f"{prefix}/a/x", f"{prefix}/a/y", f"{prefix}/b/x", f"{prefix}/a/x/deep"]
    for t in topics:
        pub.publish(t, t.encode(), qos=1, retain=True)
    got = retained_on_subscribe(raw_factory, port, f"{prefix}/a/+", 1, f"{prefix}/a/live")
    assert sorted(t for t, _, _, _ in got) == [f"{prefix}/a/x", f"{prefix}/a/y"]
    assert all(payload == t.encode() and retain for t, payload, _, retain in got)
    got = retained_on_subscribe(raw_factory, port, f"{prefix}/#", 1, f"{prefix}/live")
    assert sorted(t for t, _, _, _ in got) == sorted(topics)


def test_resubscribe_resends_retained(port: int, raw_factory: RawFactory) -> None:
    """An identical SUBSCRIBE replaces the subscription and sends retained messages again."""
    topic = unique("rs/")
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"r", qos=1, retain=True)
    sub = raw_factory(port, connected=True)
    sub.subscribe([(topic, 1)])
    (first,) = sub.collect(1)
    sub.subscribe([(topic, 1)])
    (second,) = sub.collect(1)
    assert first.retain and second.retain
    assert first.payload == second.payload == b"r"


def test_retained_in_one_subscribe_with_many_filters(port: int, raw_factory: RawFactory) -> None:
    """One retained message matched by two filters of the same SUBSCRIBE reaches the client
    (once or once per filter; never zero times)."""
    prefix = unique("rm")
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/t", b"r", qos=1, retain=True)
    sub = raw_factory(port, connected=True)
    sub.subscribe([(f"{prefix}/t", 1), (f"{prefix}/+", 1)])
    pub.publish(f"{prefix}/t", b"sentinel", qos=1)
    got = collect_until(sub, b"sentinel")
    assert 1 <= len(got) - 1 <= 2
    assert all(m.payload == b"r" and m.retain for m in got[:-1])


@pytest.mark.timeout(90)
def test_retained_survives_restart_and_crash(
    broker_factory: Callable[..., BrokerProcess], raw_factory: RawFactory
) -> None:
    """Retained messages are in the durable store: they outlive a clean restart and a crash
    (SIGKILL after the PUBACK), and so do their deletions."""
    broker = broker_factory()
    prefix = unique("rr")
    pub = raw_factory(broker.port, connected=True)
    pub.publish(f"{prefix}/a", b"before restart", qos=1, retain=True)
    pub.publish(f"{prefix}/b", b"deleted", qos=1, retain=True)
    pub.publish(f"{prefix}/b", b"", qos=1, retain=True)
    assert broker.stop() == 0
    broker.start()
    pub = raw_factory(broker.port, connected=True)
    pub.publish(f"{prefix}/c", b"before crash", qos=1, retain=True)
    pub.publish(f"{prefix}/d", b"deleted before crash", qos=1, retain=True)
    pub.publish(f"{prefix}/d", b"", qos=1, retain=True)
    broker.kill()
    broker.start()
    got = retained_on_subscribe(raw_factory, broker.port, f"{prefix}/#", 1, f"{prefix}/live")
    assert sorted(got) == [
        (f"{prefix}/a", b"before restart", 1, True),
        (f"{prefix}/c", b"before crash", 1, True),
    ]
