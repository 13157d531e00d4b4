"""PUBLISH at every QoS: delivery, downgrade, flows, ordering, matching, packet ids.

Where a test must show that something was *not* delivered it publishes a sentinel afterwards
on the same topic (messages on one topic arrive in order) and checks once the sentinel is in.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .helpers import (
    MQTT31,
    MQTT311,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    Packet,
    PahoClient,
    RawClient,
    ack_packet,
    collect_until,
    parse_publish,
    publish_packet,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]
PahoMaker = Callable[..., PahoClient]
VERSIONS = pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])


@pytest.mark.parametrize("sub_qos", [0, 1, 2])
@pytest.mark.parametrize("pub_qos", [0, 1, 2])
def test_delivered_qos_is_min_of_publish_and_granted(
    port: int, paho_client: PahoMaker, pub_qos: int, sub_qos: int
) -> None:
    topic = unique("qos/")
    sub = paho_client(port)
    assert sub.subscribe(topic, sub_qos) == [sub_qos]
    pub = paho_client(port)
    pub.publish(topic, f"p{pub_qos}s{sub_qos}", qos=pub_qos)
    (msg,) = sub.wait_messages(1)
    assert msg.payload == f"p{pub_qos}s{sub_qos}".encode()
    assert msg.qos == min(pub_qos, sub_qos)
    assert msg.retain is False
    assert msg.dup is False


@VERSIONS
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_paho_pub_sub_each_version(
    port: int, paho_client: PahoMaker, version: int, qos: int
) -> None:
    topic = unique("ver/")
    sub = paho_client(port, version=version)
    assert sub.subscribe(topic, qos) == [qos]
    pub = paho_client(port, version=version)
    for i in range(5):
        pub.publish(topic, f"m{i}", qos=qos)
    got = sub.wait_messages(5)
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(5)]
    assert {m.qos for m in got} == {qos}


def test_mqtt31_and_mqtt311_clients_talk_to_each_other(port: int, paho_client: PahoMaker) -> None:
    topic = unique("mix/")
    old = paho_client(port, version=MQTT31)
    new = paho_client(port, version=MQTT311)
    old.subscribe(topic, 2)
    new.subscribe(topic, 2)
    old.publish(topic, b"from 3.1", qos=2)
    new.publish(topic, b"from 3.1.1", qos=1)
    for client in (old, new):
        got = client.wait_messages(2)
        assert sorted(m.payload for m in got) == [b"from 3.1", b"from 3.1.1"]


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_per_topic_ordering(port: int, paho_client: PahoMaker, qos: int) -> None:
    """[MQTT-4.6.0-6]: one publisher, one topic, one QoS -> publish order is kept."""
    topic = unique("order/")
    sub = paho_client(port)
    sub.subscribe(topic, 2)
    pub = paho_client(port)
    n = 200
    infos = [pub.client.publish(topic, str(i).encode(), qos=qos) for i in range(n)]
    for info in infos:
        info.wait_for_publish(10)
    got = sub.wait_messages(n, timeout=30)
    assert [int(m.payload) for m in got] == list(range(n))


def test_raw_qos1_flow(port: int, raw_factory: RawFactory) -> None:
    topic = unique("raw1/")
    sub = raw_factory(port, connected=True)
    assert sub.subscribe([(topic, 1)]) == [1]
    pub = raw_factory(port, connected=True)
    pub.send(publish_packet(topic, b"one", qos=1, pid=10))
    pub.expect_ack(PUBACK, 10)
    msg = sub.expect_publish()
    assert (msg.topic, msg.payload, msg.qos, msg.dup, msg.retain) == (
        topic,
        b"one",
        1,
        False,
        False,
    )
    assert msg.pid is not None and 1 <= msg.pid <= 65535
    sub.send(ack_packet(PUBACK, msg.pid))
    assert sub.is_open()


def test_raw_qos2_flow_both_directions(port: int, raw_factory: RawFactory) -> None:
    """PUBLISH -> PUBREC -> PUBREL -> PUBCOMP inbound and outbound (seed 004 flows)."""
    topic = unique("raw2/")
    sub = raw_factory(port, connected=True)
    assert sub.subscribe([(topic, 2)]) == [2]
    pub = raw_factory(port, connected=True)
    pub.send(publish_packet(topic, b"two", qos=2, pid=77))
    pub.expect_ack(PUBREC, 77)
    pub.send(ack_packet(PUBREL, 77))
    pub.expect_ack(PUBCOMP, 77)
    msg = sub.expect_publish()
    assert (msg.payload, msg.qos, msg.dup) == (b"two", 2, False)
    assert msg.pid is not None and msg.pid != 0
    sub.send(ack_packet(PUBREC, msg.pid))
    sub.expect_ack(PUBREL, msg.pid)
    sub.send(ack_packet(PUBCOMP, msg.pid))
    assert sub.is_open()


def test_qos2_duplicate_publish_before_pubrel_is_delivered_once(
    port: int, raw_factory: RawFactory
) -> None:
    """A QoS 2 PUBLISH resent with DUP=1 for an id not yet released is not delivered twice."""
    topic = unique("dup2/")
    sub = raw_factory(port, connected=True)
    sub.subscribe([(topic, 2)])
    pub = raw_factory(port, connected=True)
    pub.send(publish_packet(topic, b"once", qos=2, pid=5))
    pub.expect_ack(PUBREC, 5)
    pub.send(publish_packet(topic, b"once", qos=2, pid=5, dup=True))
    pub.expect_ack(PUBREC, 5)
    pub.send(ack_packet(PUBREL, 5))
    pub.expect_ack(PUBCOMP, 5)
    pub.publish(topic, b"sentinel", qos=2)
    got = sub.collect(2)
    assert [m.payload for m in got] == [b"once", b"sentinel"]


def test_qos2_pubrel_for_unknown_id_gets_pubcomp(port: int, raw_factory: RawFactory) -> None:
    client = raw_factory(port, connected=True)
    client.send(ack_packet(PUBREL, 4321))
    client.expect_ack(PUBCOMP, 4321)


def test_qos1_duplicate_publish_is_acked_again(port: int, raw_factory: RawFactory) -> None:
    topic = unique("dup1/")
    sub = raw_factory(port, connected=True)
    sub.subscribe([(topic, 1)])
    pub = raw_factory(port, connected=True)
    pub.send(publish_packet(topic, b"a", qos=1, pid=9))
    pub.expect_ack(PUBACK, 9)
    pub.send(publish_packet(topic, b"a", qos=1, pid=9, dup=True))
    pub.expect_ack(PUBACK, 9)
    pub.publish(topic, b"sentinel", qos=1)
    got = [m.payload for m in collect_until(sub, b"sentinel")]
    # QoS 1 is at least once: one or two copies of "a", then the sentinel.
    assert got[-1] == b"sentinel"
    assert set(got[:-1]) == {b"a"}
    assert 1 <= len(got) - 1 <= 2


def test_packet_ids_are_never_zero_and_unique_in_flight(port: int, raw_factory: RawFactory) -> None:
    """[MQTT-2.3.1-1]: QoS>0 PUBLISH from the server carries a non-zero id, unique among the
    messages not yet acknowledged."""
    topic = unique("pid/")
    sub = raw_factory(port, connected=True)
    sub.subscribe([(topic, 1)])
    pub = raw_factory(port, connected=True)
    n = 1000
    for i in range(n):
        pub.send(publish_packet(topic, str(i).encode(), qos=1, pid=i % 65535 + 1))
    acked = 0
    while acked < n:
        p = pub.recv_packet()
        assert p.type == PUBACK
        acked += 1
    unacked: set[int] = set()
    payloads: list[int] = []
    while len(payloads) < n:
        p = sub.recv_packet()
        assert p.type == PUBLISH, p
        msg = parse_publish(p)
        assert msg.pid is not None and 1 <= msg.pid <= 65535
        assert msg.pid not in unacked, f"packet id {msg.pid} reused while in flight"
        unacked.add(msg.pid)
        payloads.append(int(msg.payload))
        # Ack in batches so several ids are in flight at once.
        if len(unacked) >= 10 or len(payloads) == n:
            for pid in sorted(unacked):
                sub.send(ack_packet(PUBACK, pid))
            unacked.clear()
    assert payloads == list(range(n))


def test_overlapping_subscriptions_deliver_one_copy_at_max_qos(
    port: int, raw_factory: RawFactory
) -> None:
    prefix = unique("ov")
    topic = f"{prefix}/a/b"
    sub = raw_factory(port, connected=True)
    codes = sub.subscribe([(f"{prefix}/#", 0), (f"{prefix}/+/b", 2), (topic, 1)])
    assert codes == [0, 2, 1]
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"x", qos=2)
    pub.publish(topic, b"sentinel", qos=2)
    got = sub.collect(2)
    assert [(m.payload, m.qos) for m in got] == [(b"x", 2), (b"sentinel", 2)]


def test_overlapping_subscriptions_min_with_publish_qos(port: int, raw_factory: RawFactory) -> None:
    prefix = unique("ov")
    sub = raw_factory(port, connected=True)
    sub.subscribe([(f"{prefix}/#", 2), (f"{prefix}/x", 0)])
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/x", b"q1", qos=1)
    pub.publish(f"{prefix}/x", b"sentinel", qos=1)
    got = sub.collect(2)
    assert [(m.payload, m.qos) for m in got] == [(b"q1", 1), (b"sentinel", 1)]


def test_resubscribe_replaces_qos(port: int, raw_factory: RawFactory) -> None:
    topic = unique("re/")
    sub = raw_factory(port, connected=True)
    assert sub.subscribe([(topic, 2)]) == [2]
    assert sub.subscribe([(topic, 0)]) == [0]
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"x", qos=2)
    pub.publish(topic, b"sentinel", qos=2)
    assert [(m.payload, m.qos) for m in sub.collect(2)] == [(b"x", 0), (b"sentinel", 0)]


# (filter, topic, matches)
MATCHES = [
    ("sport/tennis/player1", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/tennis/+", "sport/tennis", False),
    ("sport/#", "sport", True),
    ("sport/#", "sport/tennis/player1", True),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+/tennis/#", "sport/tennis/x", True),
    ("#", "anything/at/all", True),
    ("a//b", "a//b", True),
    ("a/+/b", "a//b", True),
    ("Sport/#", "sport/tennis", False),
]


def test_wildcard_matching(port: int, raw_factory: RawFactory) -> None:
    """[MQTT-4.7.1-2/3]: each filter under a private prefix level; one topic published per
    case, then a sentinel that every filter matches."""
    sub = raw_factory(port, connected=True)
    prefix = unique("wc")
    filters = [(f"{prefix}/{i}/{f}", 1) for i, (f, _, _) in enumerate(MATCHES)]
    assert sub.subscribe(filters) == [1] * len(MATCHES)
    pub = raw_factory(port, connected=True)
    for i, (_, topic, _) in enumerate(MATCHES):
        pub.publish(f"{prefix}/{i}/{topic}", f"case{i}".encode(), qos=1)
    pub.publish(f"{prefix}/0/sport/tennis/player1", b"sentinel", qos=1)
    got = [m.payload for m in collect_until(sub, b"sentinel")]
    expected = [f"case{i}".encode() for i, (_, _, hit) in enumerate(MATCHES) if hit]
    assert got == [*expected, b"sentinel"]


@pytest.mark.parametrize("size", [0, 1, 65535, 300_000])
def test_payload_sizes_and_binary_payloads(port: int, raw_factory: RawFactory, size: int) -> None:
    topic = unique("size/")
    sub = raw_factory(port, connected=True)
    sub.subscribe([(topic, 1)])
    pub = raw_factory(port, connected=True)
    payload = bytes(i % 256 for i in range(size))
    pub.publish(topic, payload, qos=1)
    (msg,) = sub.collect(1)
    assert msg.payload == payload


def test_unicode_topic(port: int, paho_client: PahoMaker) -> None:
    topic = unique("uni/") + "/température/日本"
    sub = paho_client(port)
    sub.subscribe(topic.split("/")[0] + "/#", 1)
    pub = paho_client(port)
    pub.publish(topic, b"x", qos=1)
    (msg,) = sub.wait_messages(1)
    assert msg.topic == topic


def test_unsubscribe_stops_delivery(port: int, raw_factory: RawFactory) -> None:
    prefix = unique("un")
    sub = raw_factory(port, connected=True)
    sub.subscribe([(f"{prefix}/a", 1), (f"{prefix}/b", 1)])
    sub.unsubscribe([f"{prefix}/a"])
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/a", b"gone", qos=1)
    pub.publish(f"{prefix}/b", b"kept", qos=1)
    (msg,) = sub.collect(1)
    assert msg.payload == b"kept"


def test_unsubscribe_unknown_filter_gets_unsuback(port: int, raw_factory: RawFactory) -> None:
    client = raw_factory(port, connected=True)
    client.unsubscribe([unique("never/")])
    assert client.is_open()


def test_invalid_filters_get_suback_0x80_in_311(port: int, raw_factory: RawFactory) -> None:
    """3.1.1: one return code per filter, in order; 0x80 for invalid filters; the connection
    stays usable and the valid filters work."""
    prefix = unique("inv")
    client = raw_factory(port, connected=True)
    codes = client.subscribe(
        [
            (f"{prefix}/ok/+", 1),
            (f"{prefix}/a/#/b", 1),
            (f"{prefix}/x+", 0),
            (f"{prefix}/#x", 2),
            (f"{prefix}/ok2/#", 2),
        ]
    )
    assert codes == [1, 0x80, 0x80, 0x80, 2]
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/ok/1", b"a", qos=1)
    pub.publish(f"{prefix}/ok2/z", b"b", qos=2)
    got = client.collect(2)
    assert sorted(m.payload for m in got) == [b"a", b"b"]


def test_invalid_filters_are_granted_and_silent_in_31(port: int, raw_factory: RawFactory) -> None:
    """3.1 has no failure code: an invalid filter is granted the QoS asked for and delivers
    nothing (README, "What is supported"); the valid filters beside it work."""
    prefix = unique("inv31")
    client = raw_factory(port, connected=True, version=MQTT31)
    codes = client.subscribe([(f"{prefix}/a/#/b", 1), (f"{prefix}/ok/#", 1), (f"{prefix}/x+", 2)])
    assert codes == [1, 1, 2]
    pub = raw_factory(port, connected=True)
    pub.publish(f"{prefix}/a/x/b", b"never", qos=1)  # what a/#/b would match, read literally
    pub.publish(f"{prefix}/ok/1", b"sentinel", qos=1)
    got = collect_until(client, b"sentinel")
    assert [m.payload for m in got] == [b"sentinel"]


def test_publisher_receives_its_own_messages(port: int, paho_client: PahoMaker) -> None:
    """MQTT 3.x has no No Local: a subscriber gets what it publishes itself."""
    topic = unique("self/")
    client = paho_client(port)
    client.subscribe(topic, 1)
    client.publish(topic, b"me", qos=1)
    assert client.wait_messages(1)[0].payload == b"me"


def test_fan_out_to_many_subscribers(port: int, paho_client: PahoMaker) -> None:
    topic = unique("fan/")
    subs = [paho_client(port, version=MQTT31 if i % 2 else MQTT311) for i in range(8)]
    for i, sub in enumerate(subs):
        sub.subscribe(topic, i % 3)
    pub = paho_client(port)
    for i in range(10):
        pub.publish(topic, str(i), qos=2)
    for i, sub in enumerate(subs):
        got = sub.wait_messages(10)
        assert [int(m.payload) for m in got] == list(range(10))
        assert {m.qos for m in got} == {i % 3}


def test_raw_publish_flags_parse() -> None:
    """Self-check of the test codec against the seed's worked example (topic "a/b", QoS 1,
    message id 10)."""
    data = publish_packet("a/b", b"", qos=1, pid=10)
    assert data == bytes([0x32, 7, 0, 3, 0x61, 0x2F, 0x62, 0, 10])
    msg = parse_publish(Packet(data[0] >> 4, data[0] & 0x0F, data[2:]))
    assert (msg.topic, msg.qos, msg.pid, msg.dup, msg.retain) == ("a/b", 1, 10, False, False)
