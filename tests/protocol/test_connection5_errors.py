"""MQTT 5.0 errors in the protocol core (docs/mqtt5.md), without a broker: packet identifier
0 is a protocol error (0x82) once the packet has parsed, and a malformed packet (0x81)
whatever its identifier (§4.13); a client's PUBLISH with a Subscription Identifier is a
protocol error [MQTT-3.3.4-6], a server's is not; the CONNACK that would pass the client's
Maximum Packet Size is never sent [MQTT-3.1.2-24]."""

from __future__ import annotations

import pytest

from telemq.protocol import (
    ConnAck,
    Connect,
    Connection,
    ConnectionClosed,
    ConnectRequested,
    Decoder,
    DialConnection,
    Disconnect,
    Flows,
    MalformedPacket,
    MessageReceived,
    Properties,
    Publish,
    ReasonCode,
    encode,
)
from telemq.protocol.codec5 import encode_connect5
from telemq.protocol.peer5 import Peer5, ServerLimits5

MQTT_5 = 5
LIMITS = ServerLimits5()


def decode5(data: bytes) -> list[object]:
    return list(Decoder(protocol_level=MQTT_5, mqtt5=True).feed(data))


@pytest.mark.parametrize(
    ("raw", "reason", "message"),
    [
        pytest.param(b"\x40\x02\x00\x00", 0x82, "PUBACK: packet identifier 0", id="puback"),
        pytest.param(
            b"\x40\x04\x00\x00\x10\x00",
            0x82,
            "PUBACK: packet identifier 0",
            id="puback-with-reason",
        ),
        pytest.param(
            b"\x40\x04\x00\x00\x00\x05",
            0x81,
            "properties run past the packet",
            id="puback-properties-past-the-end",
        ),
        pytest.param(
            b"\x40\x03\x00\x00\x05", 0x81, "PUBACK", id="puback-unknown-reason"
        ),  # 0x05 is no PUBACK reason code
        pytest.param(
            b"\x32\x08\x00\x03a/b\x00\x00\x00", 0x82, "PUBLISH: packet identifier 0", id="publish"
        ),
        pytest.param(
            b"\x32\x0d\x00\x03a/b\x00\x00\x05\x11\x00\x00\x00\x01",
            0x81,
            "not valid in this",
            id="publish-session-expiry",
        ),
        pytest.param(
            b"\x82\x07\x00\x00\x00\x00\x01a\x00",
            0x82,
            "SUBSCRIBE: packet identifier 0",
            id="subscribe",
        ),
        pytest.param(
            b"\x82\x07\x00\x00\x00\x00\x01a\xc0",
            0x81,
            "reserved bits",
            id="subscribe-reserved-option-bits",
        ),
        pytest.param(
            b"\xa2\x06\x00\x00\x00\x00\x01a",
            0x82,
            "UNSUBSCRIBE: packet identifier 0",
            id="unsubscribe",
        ),
        pytest.param(
            b"\xa2\x05\x00\x00\x00\x00\x00",
            0x81,
            "empty topic filter",
            id="unsubscribe-empty-filter",
        ),
        pytest.param(b"\x90\x04\x00\x00\x00\x00", 0x82, "SUBACK: packet identifier 0", id="suback"),
        pytest.param(
            b"\x90\x03\x00\x00\x00", 0x81, "SUBACK: no reason code", id="suback-without-codes"
        ),
    ],
)
def test_packet_identifier_0_is_checked_once_the_packet_parsed(
    raw: bytes, reason: int, message: str
) -> None:
    with pytest.raises(MalformedPacket) as caught:
        decode5(raw)
    assert caught.value.reason == reason
    assert message in str(caught.value)


def accepted5(properties: Properties | None = None) -> Connection:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    packet = Connect("c5", protocol_level=MQTT_5, properties=properties)
    assert connection.receive_data(encode_connect5(packet), 0.0) == [ConnectRequested(packet)]
    connection.accept(False, Flows(), 0.0)
    assert isinstance(decode5(connection.data_to_send())[0], ConnAck)
    return connection


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_a_client_publish_with_a_subscription_identifier_is_a_protocol_error(qos: int) -> None:
    connection = accepted5()
    publish = Publish(
        "a/b", b"x", qos, packet_id=qos, properties=Properties(subscription_identifiers=[3])
    )
    events = connection.receive_data(encode(publish, MQTT_5), 1.0)
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert events[0].code is ReasonCode.PROTOCOL_ERROR
    assert "subscription identifier" in events[0].reason
    (disconnect,) = decode5(connection.data_to_send())
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x82


def test_a_server_publish_with_subscription_identifiers_is_taken() -> None:
    """The dialer's side (links, bridges): a server sends them [MQTT-3.3.4-3]."""
    server = Connection(now=0.0, mqtt5=LIMITS)
    dialer = DialConnection(Connect("d", protocol_level=MQTT_5), now=0.0, mqtt5=LIMITS)
    (requested,) = server.receive_data(dialer.data_to_send(), 0.0)
    assert isinstance(requested, ConnectRequested)
    server.accept(False, Flows(), 0.0)
    dialer.receive_data(server.data_to_send(), 0.0)
    assert dialer.attach(Flows(), 0.0) == []
    publish = Publish("a/b", b"x", properties=Properties(subscription_identifiers=[3, 9]))
    server.send_bytes(encode(publish, MQTT_5))
    (event,) = dialer.receive_data(server.data_to_send(), 0.0)
    assert isinstance(event, MessageReceived)
    assert event.publish.properties is not None
    assert event.publish.properties.subscription_identifiers == [3, 9]


def connecting5(properties: Properties | None, client_id: str = "c5") -> Connection:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    packet = Connect(client_id, protocol_level=MQTT_5, properties=properties)
    assert connection.receive_data(encode_connect5(packet), 0.0) == [ConnectRequested(packet)]
    return connection


def test_the_connack_must_fit_the_clients_maximum_packet_size() -> None:
    # The CONNACK of the default limits is 16 bytes; an assigned client identifier of 23
    # characters adds 26.
    assert connecting5(Properties(maximum_packet_size=16)).connack_problem(None, None, None) == ""
    problem = connecting5(Properties(maximum_packet_size=15)).connack_problem(None, None, None)
    assert "CONNACK (16 bytes)" in problem and "(15 bytes)" in problem
    assigned = "telemq-0123456789abcdef"
    roomy = connecting5(Properties(maximum_packet_size=42))
    assert roomy.connack_problem(assigned, None, None) == ""
    assert connecting5(Properties(maximum_packet_size=41)).connack_problem(assigned, None, None)
    # 3.1.1 has no Maximum Packet Size.
    old = Connection(now=0.0, mqtt5=LIMITS)
    connect = Connect("c4", protocol_level=4)
    assert old.receive_data(encode(connect), 0.0) == [ConnectRequested(connect)]
    assert old.connack_problem(None, None, None) == ""


def test_closing_before_connack_sends_nothing() -> None:
    connection = connecting5(Properties(maximum_packet_size=2))
    problem = connection.connack_problem(None, None, None)
    closed = connection.close(problem, ReasonCode.PACKET_TOO_LARGE)
    assert closed == ConnectionClosed(problem, False, ReasonCode.PACKET_TOO_LARGE)
    assert connection.data_to_send() == b""


@pytest.mark.parametrize(("maximum", "sent"), [(4, False), (5, True), (64, True)])
def test_a_refusing_connack_too_large_for_the_client_is_not_sent(maximum: int, sent: bool) -> None:
    """Its Reason String goes first; below the bare CONNACK's 5 bytes, nothing is sent."""
    peer = Peer5(maximum_packet_size=maximum)
    data = peer.refusal(ReasonCode.NOT_AUTHORIZED, "will refused: $SYS/ topics are the broker's")
    if not sent:
        assert data == b""
        return
    assert 0 < len(data) <= maximum
    (ack,) = decode5(data)
    assert isinstance(ack, ConnAck) and ack.return_code == ReasonCode.NOT_AUTHORIZED
