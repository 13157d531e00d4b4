"""MQTT 5.0 details over raw sockets (docs/mqtt5.md): the reason code of the closing
DISCONNECT follows §4.13 (0x81 for a packet that cannot be parsed, 0x82 for one that parses
but is not allowed, packet identifier 0 included), a client's PUBLISH may not carry a
Subscription Identifier, a shared subscription needs a topic filter, and a client whose
Maximum Packet Size is smaller than the CONNACK is closed without one."""

from __future__ import annotations

import pytest

from telemq.protocol import (
    ConnAck,
    Connect,
    Properties,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Will,
    encode,
)
from testsupport.raw5 import V5, ConnectionClosed, Raw5, Raw5Factory

from .helpers import BrokerProcess, RawClient, unique

pytestmark = [pytest.mark.timeout(120)]

MALFORMED = 0x81
PROTOCOL_ERROR = 0x82

ZERO_PACKET_ID = [
    ("publish-qos1", b"\x32\x08\x00\x03a/b\x00\x00\x00"),
    ("publish-qos2", b"\x34\x08\x00\x03a/b\x00\x00\x00"),
    ("subscribe", b"\x82\x07\x00\x00\x00\x00\x01a\x00"),
    ("unsubscribe", b"\xa2\x06\x00\x00\x00\x00\x01a"),
    ("puback", b"\x40\x02\x00\x00"),
    ("pubrec", b"\x50\x02\x00\x00"),
    ("pubrel", b"\x62\x02\x00\x00"),
    ("pubcomp", b"\x70\x02\x00\x00"),
    ("puback-with-reason", b"\x40\x04\x00\x00\x10\x00"),
]

STILL_MALFORMED = [
    ("pubrel-reserved-flags", b"\x60\x02\x00\x01"),
    ("subscribe-reserved-flags", b"\x80\x07\x00\x01\x00\x00\x01a\x00"),
    ("publish-with-session-expiry", b"\x30\x09\x00\x01t\x05\x11\x00\x00\x00\x01"),
    ("puback-truncated", b"\x40\x01\x00"),
    # Packet identifier 0 and malformed too: malformed wins, the packet does not parse.
    ("puback-id-0-properties-past-the-end", b"\x40\x04\x00\x00\x00\x05"),
    ("subscribe-id-0-reserved-option-bits", b"\x82\x07\x00\x00\x00\x00\x01a\xc0"),
    ("suback-from-a-client-truncated", b"\x90\x02\x00\x01"),
]


def connected(raw5: Raw5Factory, port: int) -> Raw5:
    client = raw5(port)
    assert client.connect(unique("v5")).return_code == 0
    return client


@pytest.mark.parametrize(("name", "data"), ZERO_PACKET_ID, ids=[c[0] for c in ZERO_PACKET_ID])
def test_packet_identifier_0_is_a_protocol_error(
    broker: BrokerProcess, raw5: Raw5Factory, name: str, data: bytes
) -> None:
    client = connected(raw5, broker.port)
    client.send_bytes(data)
    disconnect = client.disconnected()
    assert disconnect.reason_code == PROTOCOL_ERROR, name
    assert disconnect.properties is not None
    assert "packet identifier 0" in (disconnect.properties.reason_string or "")


@pytest.mark.parametrize(("name", "data"), STILL_MALFORMED, ids=[c[0] for c in STILL_MALFORMED])
def test_a_packet_that_does_not_parse_is_still_malformed(
    broker: BrokerProcess, raw5: Raw5Factory, name: str, data: bytes
) -> None:
    client = connected(raw5, broker.port)
    client.send_bytes(data)
    assert client.disconnected().reason_code == MALFORMED, name


def test_a_server_only_packet_that_parses_is_a_protocol_error(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = connected(raw5, broker.port)
    client.send_bytes(b"\x90\x04\x00\x01\x00\x00")  # SUBACK from a client
    assert client.disconnected().reason_code == PROTOCOL_ERROR


@pytest.mark.parametrize("qos", [0, 1])
def test_a_publish_with_a_subscription_identifier_is_a_protocol_error(
    broker: BrokerProcess, raw5: Raw5Factory, qos: int
) -> None:
    topic = unique("subid/")
    reader = connected(raw5, broker.port)
    reader.send(Subscribe(1, [(topic, 1)]))
    assert reader.recv() == SubAck(1, [1])
    client = connected(raw5, broker.port)
    ids = Properties(subscription_identifiers=[7])
    client.send(Publish(topic, b"x", qos=qos, packet_id=qos, properties=ids))
    disconnect = client.disconnected()
    assert disconnect.reason_code == PROTOCOL_ERROR
    assert disconnect.properties is not None
    assert "subscription identifier" in (disconnect.properties.reason_string or "")
    assert reader.try_recv(0.5) is None  # not delivered either


@pytest.mark.parametrize("topic_filter", ["$share/group/", "$share/group"])
def test_a_shared_subscription_without_a_filter_is_a_protocol_error(
    broker: BrokerProcess, raw5: Raw5Factory, topic_filter: str
) -> None:
    client = connected(raw5, broker.port)
    client.send(Subscribe(1, [("a/b", 1), (topic_filter, 1)]))
    disconnect = client.disconnected()
    assert disconnect.reason_code == PROTOCOL_ERROR
    assert disconnect.properties is not None
    assert topic_filter in (disconnect.properties.reason_string or "")


def test_at_mqtt311_a_shared_subscription_without_a_filter_is_refused_in_suback(
    broker: BrokerProcess,
) -> None:
    """3.1.1 has no protocol error to send: the SUBACK says 0x80 and the connection stays."""
    with RawClient(broker.port) as client:
        assert client.connect(unique("v311")).return_code == 0
        assert client.subscribe([("$share/group/", 1), ("a/b", 1)]) == [0x80, 1]


@pytest.mark.parametrize(
    ("client_id", "maximum", "accepted"),
    [
        ("", 2, False),  # smaller than any CONNACK
        ("named", 14, False),  # the CONNACK states the broker's limits: 16 bytes
        ("named", 16, True),
        ("", 30, False),  # 16 bytes and the assigned client identifier
    ],
    ids=["2-bytes", "14-bytes", "16-bytes", "assigned-id"],
)
def test_a_maximum_packet_size_smaller_than_the_connack_closes_without_one(
    broker: BrokerProcess, raw5: Raw5Factory, client_id: str, maximum: int, accepted: bool
) -> None:
    client = raw5(broker.port)
    limit = Properties(maximum_packet_size=maximum)
    client_id = unique(client_id) if client_id else ""
    client.send(Connect(client_id, protocol_level=V5, properties=limit))
    if accepted:
        ack = client.recv()
        assert isinstance(ack, ConnAck) and ack.return_code == 0
        assert len(encode(ack, V5)) <= maximum
        client.send(Publish(unique("mps/"), b"", qos=1, packet_id=1))
        assert client.recv() == PubAck(1)
    else:
        closed_without_a_packet(client)


def test_a_refusal_too_large_for_the_client_is_not_sent(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    """A will the broker refuses gets CONNACK 0x87; with Maximum Packet Size 4 not even
    the bare CONNACK (5 bytes) may be sent: the connection just closes."""
    client = raw5(broker.port)
    client.send(
        Connect(
            unique("w"),
            protocol_level=V5,
            will=Will("$SYS/broker/uptime", b"0"),
            properties=Properties(maximum_packet_size=4),
        )
    )
    closed_without_a_packet(client)


def closed_without_a_packet(client: Raw5) -> None:
    """The broker closes the connection and sends nothing before it does."""
    with pytest.raises(ConnectionClosed):
        packet = client.recv()
        raise AssertionError(f"the broker sent {packet}")
