"""The server-side `Connection` at MQTT 5.0 (`mqtt5=ServerLimits5(...)`), driven by plain
function calls: bytes made with `encode(packet, 5)` go in, and what the server writes is
decoded with `Decoder(protocol_level=5, mqtt5=True)` (or compared byte for byte, the golden
bytes written by hand from OASIS MQTT 5.0 chapter 3).

Covered: the CONNACK that states the server's limits (and Server Keep Alive), refusals with
5.0 reason codes, the DISCONNECT sent before every close after CONNACK, the checks of an
incoming PUBLISH (maximum QoS, retain, topic aliases, Receive Maximum, payload format), the
outgoing side (properties, the client's Receive Maximum, Maximum Packet Size and topic
aliases), acknowledgements with reason codes, DISCONNECT from the client, subscription
identifiers, and SUBACK/UNSUBACK at level 5.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from telemq.protocol import (
    ConnAck,
    Connect,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectRequested,
    ConnectReturnCode,
    Decoder,
    DeliveryAcknowledged,
    DeliveryReceived,
    Disconnect,
    DisconnectRequested,
    Event,
    Flows,
    MessageReceived,
    Packet,
    PacketType,
    Properties,
    PropertyContext,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscribeRequested,
    UnsubAck,
    Unsubscribe,
    UnsubscribeRequested,
    encode,
    encode_properties,
    encode_publish5,
)
from telemq.protocol.codec5 import encode_connect5
from telemq.protocol.peer5 import MAX_MQTT_PACKET, ServerLimits5

MQTT_5 = 5

# The server's limits for most tests: each differs from the MQTT 5.0 default, so each is
# stated in CONNACK.
LIMITS = ServerLimits5(
    receive_maximum=10,
    maximum_packet_size=4096,
    topic_alias_maximum=4,
    subscription_identifier_available=False,
    shared_subscription_available=False,
)
# What CONNACK says for LIMITS, in identifier order: Receive Maximum 10, Topic Alias
# Maximum 4, Maximum Packet Size 4096, Subscription Identifier Available 0, Shared
# Subscription Available 0 (maximum QoS 2, retain and wildcards available: left out).
LIMITS_PROPERTIES = (
    b"\x21\x00\x0a" + b"\x22\x00\x04" + b"\x27\x00\x00\x10\x00" + b"\x29\x00" + b"\x2a\x00"
)
CONNACK_LIMITS = b"\x20\x12\x00\x00\x0f" + LIMITS_PROPERTIES
CONNACK_1 = b"\x20\x02\x00\x01"  # 3.1.1's "unacceptable protocol version"


# ---------------------------------------------------------------------------
# Helpers


def connect5(
    client_id: str = "c5",
    *,
    keepalive: int = 60,
    clean_start: bool = True,
    properties: Properties | None = None,
) -> Connect:
    return Connect(
        client_id,
        protocol_level=MQTT_5,
        clean_session=clean_start,
        keepalive=keepalive,
        properties=properties,
    )


def open5(
    limits: ServerLimits5 = LIMITS,
    *,
    now: float = 0.0,
    keepalive: int = 60,
    properties: Properties | None = None,
    max_packet_size: int = 1024 * 1024,
) -> Connection:
    """A level-5 connection whose CONNECT was read (not answered yet)."""
    connection = Connection(now=now, max_packet_size=max_packet_size, mqtt5=limits)
    packet = connect5(keepalive=keepalive, properties=properties)
    assert connection.receive_data(encode_connect5(packet), now) == [ConnectRequested(packet)]
    assert connection.data_to_send() == b""
    return connection


def accepted5(
    limits: ServerLimits5 = LIMITS,
    *,
    flows: Flows | None = None,
    now: float = 0.0,
    keepalive: int = 60,
    properties: Properties | None = None,
    max_packet_size: int = 1024 * 1024,
) -> tuple[Connection, Flows]:
    """A level-5 connection accepted; its CONNACK is taken out."""
    connection = open5(
        limits,
        now=now,
        keepalive=keepalive,
        properties=properties,
        max_packet_size=max_packet_size,
    )
    flows = Flows() if flows is None else flows
    connection.accept(False, flows, now)
    (connack,) = decode5(connection.data_to_send())
    assert isinstance(connack, ConnAck)
    assert connack.return_code == 0
    return connection, flows


def decode5(data: bytes) -> list[Packet]:
    """What the server wrote, read as a 5.0 client reads it (always well formed)."""
    decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
    packets = decoder.feed(data)
    assert decoder.buffered == 0
    return packets


def written(connection: Connection) -> list[Packet]:
    return decode5(connection.data_to_send())


def publish5(
    topic: str,
    payload: bytes = b"x",
    qos: int = 0,
    packet_id: int = 0,
    *,
    retain: bool = False,
    dup: bool = False,
    properties: Properties | None = None,
) -> bytes:
    return encode(Publish(topic, payload, qos, retain, dup, packet_id, None, properties), MQTT_5)


def state_of(connection: Connection) -> ConnectionState:
    """The state, read anew (not narrowed by an earlier assertion on it)."""
    return connection.state


def only_closed(events: Sequence[Event], code: ReasonCode) -> ConnectionClosed:
    assert len(events) == 1, events
    closed = events[0]
    assert isinstance(closed, ConnectionClosed)
    assert closed.code is code
    assert not closed.graceful
    return closed


def assert_disconnected(connection: Connection, closed: ConnectionClosed) -> None:
    """The server wrote exactly one DISCONNECT, with the close's code and reason, and the
    connection is over."""
    assert written(connection) == [Disconnect(closed.code, Properties(reason_string=closed.reason))]
    assert connection.closed
    assert state_of(connection) is ConnectionState.CLOSED
    assert connection.receive_data(b"\xc0\x00", 100.0) == []
    assert connection.connection_lost() == []
    assert connection.data_to_send() == b""


def properties_without_length(props: Properties) -> bytes:
    """What `deliver` and `send_publish` take: a PUBLISH's properties, encoded one after the
    other without their length (short blocks here: one length byte)."""
    block = encode_properties(props, PropertyContext.PUBLISH)
    assert block[0] == len(block) - 1 < 128
    return block[1:]


# ---------------------------------------------------------------------------
# CONNECT and CONNACK


def test_a_level_5_connect_is_reported_and_accept_states_the_limits() -> None:
    props = Properties(receive_maximum=7, maximum_packet_size=500, topic_alias_maximum=3)
    connection = Connection(now=0.0, mqtt5=LIMITS)
    packet = connect5("dev-5", keepalive=30, properties=props)
    raw = encode(packet, MQTT_5)
    assert raw == encode_connect5(packet)
    assert connection.receive_data(raw, 0.0) == [ConnectRequested(packet)]
    assert connection.state is ConnectionState.CONNECTING
    assert connection.protocol_level == MQTT_5
    assert connection.keepalive == 30
    assert connection.data_to_send() == b""  # the owner answers
    peer = connection.peer5
    assert peer is not None
    assert (peer.receive_maximum, peer.maximum_packet_size, peer.topic_alias_maximum) == (7, 500, 3)
    connection.accept(False, Flows(), 0.0)
    assert connection.data_to_send() == CONNACK_LIMITS
    assert state_of(connection) is ConnectionState.CONNECTED
    assert not connection.closed


def test_connack_leaves_out_what_is_the_default() -> None:
    """Receive Maximum 65535, Maximum QoS 2, Retain Available 1, no Maximum Packet Size, no
    topic aliases, every feature available: an empty property block."""
    limits = ServerLimits5(
        receive_maximum=65535,
        maximum_packet_size=MAX_MQTT_PACKET,
        topic_alias_maximum=0,
        subscription_identifier_available=True,
        shared_subscription_available=True,
    )
    connection = open5(limits)
    connection.accept(False, Flows(), 0.0)
    assert connection.data_to_send() == b"\x20\x03\x00\x00\x00"


def test_connack_states_every_limit_below_the_default() -> None:
    limits = ServerLimits5(
        receive_maximum=5,
        maximum_qos=1,
        retain_available=False,
        maximum_packet_size=1000,
        topic_alias_maximum=0,
        wildcard_subscription_available=False,
        subscription_identifier_available=False,
        shared_subscription_available=False,
    )
    connection = open5(limits)
    connection.accept(False, Flows(), 0.0)
    props = (
        b"\x21\x00\x05"  # Receive Maximum 5
        + b"\x24\x01"  # Maximum QoS 1
        + b"\x25\x00"  # Retain Available 0
        + b"\x27\x00\x00\x03\xe8"  # Maximum Packet Size 1000
        + b"\x28\x00"  # Wildcard Subscription Available 0
        + b"\x29\x00"  # Subscription Identifier Available 0
        + b"\x2a\x00"  # Shared Subscription Available 0
    )
    assert connection.data_to_send() == b"\x20\x15\x00\x00\x12" + props


def test_connack_carries_the_assigned_client_id_and_session_expiry() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    packet = connect5("", clean_start=False, properties=Properties(session_expiry_interval=7200))
    # An empty client id is the server's to assign, whatever Clean Start says.
    assert connection.receive_data(encode(packet, MQTT_5), 0.0) == [ConnectRequested(packet)]
    connection.accept(True, Flows(), 0.0, assigned_client_id="auto-1", session_expiry_interval=3600)
    props = (
        b"\x11\x00\x00\x0e\x10"  # Session Expiry Interval 3600
        + b"\x12\x00\x06auto-1"  # Assigned Client Identifier
        + LIMITS_PROPERTIES
    )
    assert connection.data_to_send() == b"\x20\x20\x01\x00\x1d" + props
    assert decode5(b"\x20\x20\x01\x00\x1d" + props) == [
        ConnAck(
            0,
            True,
            Properties(
                session_expiry_interval=3600,
                assigned_client_identifier="auto-1",
                receive_maximum=10,
                topic_alias_maximum=4,
                maximum_packet_size=4096,
                subscription_identifier_available=0,
                shared_subscription_available=0,
            ),
        )
    ]


@pytest.mark.parametrize("client_keepalive", [60, 0])
def test_server_keep_alive_lowers_the_keepalive_and_is_stated(client_keepalive: int) -> None:
    """A keep-alive above the server's (or 0, none) becomes the server's, sent back as
    Server Keep Alive; the timer runs on it: 1.5 x 30 s."""
    limits = dataclasses.replace(LIMITS, server_keep_alive=30)
    connection = open5(limits, keepalive=client_keepalive)
    assert connection.keepalive == 30
    connection.accept(False, Flows(), 0.0)
    props = b"\x13\x00\x1e" + LIMITS_PROPERTIES  # Server Keep Alive (0x13) comes first
    assert connection.data_to_send() == b"\x20\x15\x00\x00\x12" + props
    assert connection.next_timer() == 45.0
    assert connection.handle_timer(44.9) == []
    closed = only_closed(connection.handle_timer(45.0), ReasonCode.KEEP_ALIVE_TIMEOUT)
    assert closed.reason == "keep-alive expired: nothing received for 45 s"
    assert_disconnected(connection, closed)


def test_a_keepalive_below_the_servers_is_kept_and_not_restated() -> None:
    limits = dataclasses.replace(LIMITS, server_keep_alive=30)
    connection = open5(limits, keepalive=10)
    assert connection.keepalive == 10
    connection.accept(False, Flows(), 0.0)
    assert connection.data_to_send() == CONNACK_LIMITS
    assert connection.next_timer() == 15.0


def test_without_mqtt5_a_level_5_connect_gets_connack_1() -> None:
    connection = Connection(now=0.0)
    packet = connect5(properties=Properties(receive_maximum=5))
    closed = only_closed(
        connection.receive_data(encode(packet, MQTT_5), 0.0),
        ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    )
    assert closed.reason == "unsupported protocol level 5"
    assert connection.data_to_send() == CONNACK_1  # the 3.1.1 shape: no property block
    assert connection.peer5 is None
    assert connection.closed


def test_a_3_1_1_connect_to_a_5_0_server_stays_3_1_1() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    packet = Connect("c4", keepalive=60)
    assert connection.receive_data(encode(packet), 0.0) == [ConnectRequested(packet)]
    assert connection.peer5 is None
    connection.accept(False, Flows(), 0.0)
    assert connection.data_to_send() == b"\x20\x02\x00\x00"
    closed = only_closed(connection.receive_data(encode(packet), 1.0), ReasonCode.PROTOCOL_ERROR)
    assert "a second CONNECT" in closed.reason
    assert connection.data_to_send() == b""  # 3.1.1 has no DISCONNECT from the server


def test_a_level_5_connect_named_mqisdp_is_not_mqtt_5() -> None:
    """codec._read_connect returns the stub `Connect("", 5, protocol_name="MQIsdp")` and says
    "the connection answers CONNACK 1 and closes" (MQTT 5.0 [MQTT-3.1.2-1]); but
    `Connection._handle_connect` looks at the level only, so with `mqtt5` it opens a 5.0
    session for a CONNECT it never parsed (its flags, keep-alive, client id, will)."""
    body = b"\x00\x06MQIsdp\x05\x02\x00\x3c\x00\x00\x01c"
    connection = Connection(now=0.0, mqtt5=LIMITS)
    events = connection.receive_data(b"\x10" + bytes((len(body),)) + body, 0.0)
    assert not any(isinstance(event, ConnectRequested) for event in events)
    only_closed(events, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION)
    assert connection.data_to_send() == CONNACK_1


# ---------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("return_code", "code5"),
    [
        (ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION, 0x84),
        (ConnectReturnCode.IDENTIFIER_REJECTED, 0x85),
        (ConnectReturnCode.SERVER_UNAVAILABLE, 0x88),
        (ConnectReturnCode.BAD_USERNAME_OR_PASSWORD, 0x86),
        (ConnectReturnCode.NOT_AUTHORIZED, 0x87),
    ],
    ids=lambda value: getattr(value, "name", f"0x{value:02X}"),
)
def test_refuse_sends_the_5_0_reason_code_and_a_reason_string(
    return_code: ConnectReturnCode, code5: int
) -> None:
    connection = open5()
    closed = connection.refuse(return_code, "no")
    assert closed == ConnectionClosed("no", False, ReasonCode(code5))
    # Session Present 0, the reason code, properties: Reason String "no".
    assert connection.data_to_send() == b"\x20\x08\x00" + bytes((code5,)) + b"\x05\x1f\x00\x02no"
    assert connection.closed
    assert connection.data_to_send() == b""  # CONNACK only: no DISCONNECT before CONNACK


def test_refuse_with_an_explicit_5_0_code() -> None:
    connection = open5()
    closed = connection.refuse(
        ConnectReturnCode.NOT_AUTHORIZED, "bad method", ReasonCode.BAD_AUTHENTICATION_METHOD
    )
    assert closed == ConnectionClosed("bad method", False, ReasonCode.BAD_AUTHENTICATION_METHOD)
    assert connection.data_to_send() == b"\x20\x10\x00\x8c\x0d\x1f\x00\x0abad method"


def test_refuse_cuts_the_reason_string_to_200_characters() -> None:
    connection = open5()
    reason = "r" * 300
    closed = connection.refuse(ConnectReturnCode.SERVER_UNAVAILABLE, reason)
    assert closed.reason == reason  # the log keeps it whole
    assert written(connection) == [ConnAck(0x88, False, Properties(reason_string="r" * 200))]


def test_refuse_of_a_3_1_1_connection_to_a_5_0_server_is_3_1_1() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    connection.receive_data(encode(Connect("c4")), 0.0)
    closed = connection.refuse(ConnectReturnCode.NOT_AUTHORIZED, "no")
    assert closed.code is ReasonCode.NOT_AUTHORIZED
    assert connection.data_to_send() == b"\x20\x02\x00\x05"


def test_refuse_drops_the_reason_string_beyond_the_clients_maximum_packet_size() -> None:
    """MQTT 5.0 §3.2.2.3.9 [MQTT-3.2.2-19]: "The Server MUST NOT send this property if it
    would increase the size of the CONNACK packet beyond the Maximum Packet Size specified
    by the Client". `_disconnect_bytes` does so for DISCONNECT; `refuse` does not."""
    connection = open5(properties=Properties(maximum_packet_size=16))
    connection.refuse(ConnectReturnCode.NOT_AUTHORIZED, "not authorized to connect here")
    data = connection.data_to_send()
    assert len(data) <= 16
    assert data == b"\x20\x03\x00\x87\x00"


# ---------------------------------------------------------------------------
# Errors after CONNACK: DISCONNECT with a reason code first


def test_a_malformed_packet_gets_disconnect_0x81() -> None:
    connection, _ = accepted5()
    # PUBACK with reason code 0x92, which §3.4.2.1 does not list for PUBACK.
    closed = only_closed(
        connection.receive_data(b"\x40\x03\x00\x01\x92", 1.0), ReasonCode.MALFORMED_PACKET
    )
    assert closed.reason.startswith("malformed packet: ")
    assert "reason code 0x92 is not valid" in closed.reason
    assert_disconnected(connection, closed)


def test_a_second_connect_gets_disconnect_0x82() -> None:
    connection, _ = accepted5()
    closed = only_closed(
        connection.receive_data(encode(connect5(), MQTT_5), 1.0), ReasonCode.PROTOCOL_ERROR
    )
    assert closed.reason == "a second CONNECT on the same connection"
    # e0, remaining 44, 0x82, property length 42: Reason String of 39 characters.
    assert connection.data_to_send() == (
        b"\xe0\x2c\x82\x2a\x1f\x00\x27a second CONNECT on the same connection"
    )
    assert connection.closed


def test_a_packet_beyond_max_packet_size_gets_disconnect_0x95() -> None:
    connection, _ = accepted5(max_packet_size=64)
    closed = only_closed(
        connection.receive_data(publish5("a", b"p" * 100), 1.0), ReasonCode.PACKET_TOO_LARGE
    )
    assert closed.reason.startswith("packet too large: ")
    assert "exceeds the maximum packet size of 64 bytes" in closed.reason
    assert_disconnected(connection, closed)


def test_keepalive_expiry_gets_disconnect_0x8d() -> None:
    connection, _ = accepted5(keepalive=10)
    assert connection.receive_data(b"\xc0\x00", 5.0) == []  # PINGREQ: alive at 5 s
    assert connection.data_to_send() == b"\xd0\x00"
    assert connection.next_timer() == 20.0
    closed = only_closed(connection.handle_timer(20.0), ReasonCode.KEEP_ALIVE_TIMEOUT)
    assert closed.reason == "keep-alive expired: nothing received for 15 s"
    assert_disconnected(connection, closed)


def test_pingreq_is_answered_at_level_5() -> None:
    connection, _ = accepted5()
    assert connection.receive_data(b"\xc0\x00", 1.0) == []
    assert connection.data_to_send() == b"\xd0\x00"


def test_server_close_gets_disconnect_with_its_code() -> None:
    connection, _ = accepted5()
    closed = connection.close("taken over", ReasonCode.SESSION_TAKEN_OVER)
    assert closed == ConnectionClosed("taken over", False, ReasonCode.SESSION_TAKEN_OVER)
    assert connection.data_to_send() == b"\xe0\x0f\x8e\x0d\x1f\x00\x0ataken over"
    assert connection.closed


def test_server_close_defaults_to_administrative_action() -> None:
    connection, _ = accepted5()
    closed = connection.close("shutdown")
    assert closed.code is ReasonCode.ADMINISTRATIVE_ACTION
    assert_disconnected(connection, closed)


def test_a_code_disconnect_cannot_carry_is_sent_as_unspecified_error() -> None:
    connection, _ = accepted5()
    closed = connection.close("bad id", ReasonCode.CLIENT_IDENTIFIER_NOT_VALID)
    assert closed.code is ReasonCode.CLIENT_IDENTIFIER_NOT_VALID  # for the log
    assert written(connection) == [Disconnect(0x80, Properties(reason_string="bad id"))]


def test_nothing_is_written_before_connack() -> None:
    # Before CONNECT: a close, a first packet that is not CONNECT, the connect timeout.
    connection = Connection(now=0.0, mqtt5=LIMITS)
    connection.close("shutdown")
    assert connection.data_to_send() == b""
    connection = Connection(now=0.0, mqtt5=LIMITS)
    only_closed(connection.receive_data(b"\xc0\x00", 0.0), ReasonCode.PROTOCOL_ERROR)
    assert connection.data_to_send() == b""
    connection = Connection(now=0.0, connect_timeout=5.0, mqtt5=LIMITS)
    only_closed(connection.handle_timer(5.0), ReasonCode.KEEP_ALIVE_TIMEOUT)
    assert connection.data_to_send() == b""
    # A malformed level-5 CONNECT.
    connection = Connection(now=0.0, mqtt5=LIMITS)
    only_closed(
        connection.receive_data(b"\x10\x0d\x00\x04MQTT\x05\x02\x00\x3c\x05\x00\x01c", 0.0),
        ReasonCode.MALFORMED_PACKET,
    )
    assert connection.data_to_send() == b""
    # CONNECT read, not answered: a server close writes nothing, not even a CONNACK.
    connection = open5()
    assert connection.close("shutdown").code is ReasonCode.ADMINISTRATIVE_ACTION
    assert connection.data_to_send() == b""
    # A refusal is CONNACK only, even with a bad packet waiting behind the CONNECT.
    connection = open5()
    assert connection.receive_data(b"\x40\x03\x00\x01\x92", 0.0) == []  # held
    connection.refuse(ConnectReturnCode.NOT_AUTHORIZED, "no")
    assert [type(packet) for packet in written(connection)] == [ConnAck]
    assert connection.receive_data(b"", 0.0) == []
    assert connection.data_to_send() == b""


def test_a_bad_packet_behind_the_connect_gets_disconnect_after_the_connack() -> None:
    connection = open5()
    assert connection.receive_data(b"\x40\x03\x00\x01\x92", 0.0) == []  # held
    connection.accept(False, Flows(), 0.0)
    closed = only_closed(connection.receive_data(b"", 0.0), ReasonCode.MALFORMED_PACKET)
    connack, disconnect = written(connection)
    assert isinstance(connack, ConnAck)
    assert disconnect == Disconnect(0x81, Properties(reason_string=closed.reason))


def test_nothing_is_written_after_connection_lost() -> None:
    connection, _ = accepted5()
    assert connection.connection_lost() == [
        ConnectionClosed("connection lost", False, ReasonCode.UNSPECIFIED_ERROR)
    ]
    connection.close("shutdown", ReasonCode.SERVER_SHUTTING_DOWN)
    assert connection.handle_timer(1000.0) == []
    assert connection.receive_data(encode(connect5(), MQTT_5), 1.0) == []
    assert connection.data_to_send() == b""


def test_disconnect_drops_its_reason_string_beyond_the_clients_maximum_packet_size() -> None:
    # With its Reason String "bye" the DISCONNECT is 10 bytes: one byte too many for 9.
    connection, _ = accepted5(properties=Properties(maximum_packet_size=9))
    closed = connection.close("bye", ReasonCode.SESSION_TAKEN_OVER)
    assert connection.data_to_send() == b"\xe0\x01\x8e"
    assert closed.reason == "bye"  # the log keeps it
    # Exactly the client's maximum: kept.
    connection, _ = accepted5(properties=Properties(maximum_packet_size=10))
    connection.close("bye", ReasonCode.SESSION_TAKEN_OVER)
    assert connection.data_to_send() == b"\xe0\x08\x8e\x06\x1f\x00\x03bye"
    # A malformed packet's long reason, likewise.
    connection, _ = accepted5(properties=Properties(maximum_packet_size=16))
    connection.receive_data(b"\x40\x03\x00\x01\x92", 1.0)
    assert connection.data_to_send() == b"\xe0\x01\x81"


# ---------------------------------------------------------------------------
# Incoming PUBLISH


def test_qos_above_maximum_qos_gets_disconnect_0x9b() -> None:
    limits = ServerLimits5(maximum_qos=1)
    connection, _ = accepted5(limits)
    assert connection.receive_data(publish5("a", qos=1, packet_id=1), 1.0) == [
        MessageReceived(Publish("a", b"x", 1, packet_id=1))
    ]
    closed = only_closed(
        connection.receive_data(publish5("a", qos=2, packet_id=2), 1.0),
        ReasonCode.QOS_NOT_SUPPORTED,
    )
    assert closed.reason == "QoS 2 is above the maximum of 1"
    assert_disconnected(connection, closed)


def test_retain_when_not_available_gets_disconnect_0x9a() -> None:
    connection, _ = accepted5(ServerLimits5(retain_available=False))
    closed = only_closed(
        connection.receive_data(publish5("a", retain=True), 1.0),
        ReasonCode.RETAIN_NOT_SUPPORTED,
    )
    assert closed.reason == "retain is not available"
    assert_disconnected(connection, closed)


def test_topic_alias_above_the_maximum_gets_disconnect_0x94() -> None:
    connection, _ = accepted5()  # Topic Alias Maximum 4
    raw = publish5("a", properties=Properties(topic_alias=5))
    closed = only_closed(connection.receive_data(raw, 1.0), ReasonCode.TOPIC_ALIAS_INVALID)
    assert closed.reason == "topic alias 5 is above the maximum of 4"
    assert_disconnected(connection, closed)


def test_topic_alias_when_the_server_allows_none_gets_disconnect_0x94() -> None:
    connection, _ = accepted5(ServerLimits5(topic_alias_maximum=0))
    raw = publish5("a", properties=Properties(topic_alias=1))
    closed = only_closed(connection.receive_data(raw, 1.0), ReasonCode.TOPIC_ALIAS_INVALID)
    assert_disconnected(connection, closed)


def test_topic_alias_0_gets_disconnect_0x94() -> None:
    connection, _ = accepted5()
    # QoS 0 PUBLISH of "a", properties: Topic Alias 0 (the encoder refuses to write it).
    closed = only_closed(
        connection.receive_data(b"\x30\x07\x00\x01a\x03\x23\x00\x00", 1.0),
        ReasonCode.TOPIC_ALIAS_INVALID,
    )
    assert_disconnected(connection, closed)


def test_a_topic_alias_set_then_used_fills_in_the_topic() -> None:
    connection, _ = accepted5()
    events = connection.receive_data(
        publish5("a/b", b"1", properties=Properties(topic_alias=1)), 1.0
    )
    assert len(events) == 1 and isinstance(events[0], MessageReceived)
    publish = events[0].publish
    assert (publish.topic, publish.payload) == ("a/b", b"1")
    assert publish.properties is not None and publish.properties.topic_alias is None
    # The alias alone: the topic is filled in, the alias taken off.
    events = connection.receive_data(publish5("", b"2", properties=Properties(topic_alias=1)), 2.0)
    assert len(events) == 1 and isinstance(events[0], MessageReceived)
    publish = events[0].publish
    assert (publish.topic, publish.payload, publish.qos) == ("a/b", b"2", 0)
    assert publish.properties is not None and publish.properties.topic_alias is None
    assert publish.properties.is_empty()
    # Set again to another topic, with other properties kept.
    props = Properties(topic_alias=1, user_properties=[("k", "v")])
    connection.receive_data(publish5("c", b"3", 1, 7, properties=props), 3.0)
    events = connection.receive_data(
        publish5("", b"4", 1, 8, properties=Properties(topic_alias=1, content_type="t")), 4.0
    )
    assert events == [
        MessageReceived(Publish("c", b"4", 1, packet_id=8, properties=Properties(content_type="t")))
    ]
    assert connection.data_to_send() == b""  # the owner acknowledges
    assert not connection.closed


def test_an_unknown_topic_alias_with_an_empty_topic_gets_disconnect_0x82() -> None:
    connection, _ = accepted5()
    closed = only_closed(
        connection.receive_data(publish5("", properties=Properties(topic_alias=2)), 1.0),
        ReasonCode.PROTOCOL_ERROR,
    )
    assert closed.reason == "topic alias 2 was never set"
    assert_disconnected(connection, closed)


def test_an_empty_topic_without_an_alias_gets_disconnect_0x82() -> None:
    connection, _ = accepted5()
    closed = only_closed(
        connection.receive_data(b"\x30\x04\x00\x00\x00x", 1.0), ReasonCode.PROTOCOL_ERROR
    )
    assert_disconnected(connection, closed)


def test_topic_aliases_belong_to_one_connection() -> None:
    connection, flows = accepted5()
    connection.receive_data(publish5("a/b", properties=Properties(topic_alias=1)), 1.0)
    connection.connection_lost()
    connection = open5()
    connection.accept(True, flows, 2.0)
    connection.data_to_send()
    closed = only_closed(
        connection.receive_data(publish5("", properties=Properties(topic_alias=1)), 3.0),
        ReasonCode.PROTOCOL_ERROR,
    )
    assert_disconnected(connection, closed)


def _receive_maximum_2() -> Connection:
    connection, _ = accepted5(ServerLimits5(receive_maximum=2))
    assert connection.receive_data(publish5("a", qos=1, packet_id=1), 1.0) == [
        MessageReceived(Publish("a", b"x", 1, packet_id=1))
    ]
    assert connection.receive_data(publish5("a", qos=1, packet_id=2), 1.0) == [
        MessageReceived(Publish("a", b"x", 1, packet_id=2))
    ]
    return connection


def test_a_third_unanswered_publish_gets_disconnect_0x93() -> None:
    connection = _receive_maximum_2()
    closed = only_closed(
        connection.receive_data(publish5("a", qos=1, packet_id=3), 1.0),
        ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
    )
    assert closed.reason == "more than 2 QoS 1/2 PUBLISHes unanswered"
    assert_disconnected(connection, closed)


def test_qos_0_does_not_count_against_the_receive_maximum() -> None:
    connection = _receive_maximum_2()
    for _ in range(5):
        assert len(connection.receive_data(publish5("a"), 1.0)) == 1
    assert not connection.closed


def test_puback_frees_a_place_in_the_receive_maximum() -> None:
    connection = _receive_maximum_2()
    connection.acknowledge(PacketType.PUBACK, 1)
    assert connection.data_to_send() == b"\x40\x02\x00\x01"
    assert connection.receive_data(publish5("a", qos=1, packet_id=3), 2.0) == [
        MessageReceived(Publish("a", b"x", 1, packet_id=3))
    ]
    only_closed(
        connection.receive_data(publish5("a", qos=1, packet_id=4), 2.0),
        ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
    )


def test_a_qos_2_resend_of_a_held_id_does_not_count_twice() -> None:
    connection, flows = accepted5(ServerLimits5(receive_maximum=2))
    assert connection.receive_data(publish5("a", qos=2, packet_id=1), 1.0) == [
        MessageReceived(Publish("a", b"x", 2, packet_id=1))
    ]
    flows.hold_incoming(1, "message-1")
    connection.acknowledge(PacketType.PUBREC, 1)
    assert connection.data_to_send() == b"\x50\x02\x00\x01"
    # The PUBREC was lost: the client sends the PUBLISH again, DUP=1.
    assert connection.receive_data(publish5("a", qos=2, packet_id=1, dup=True), 2.0) == [
        MessageReceived(Publish("a", b"x", 2, dup=True, packet_id=1), duplicate=True)
    ]
    assert connection.receive_data(publish5("a", qos=1, packet_id=2), 2.0) == [
        MessageReceived(Publish("a", b"x", 1, packet_id=2))
    ]
    only_closed(
        connection.receive_data(publish5("a", qos=1, packet_id=3), 2.0),
        ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
    )


def test_a_qos_2_exchange_counts_until_pubcomp() -> None:
    connection, flows = accepted5(ServerLimits5(receive_maximum=1))
    connection.receive_data(publish5("a", qos=2, packet_id=1), 1.0)
    flows.hold_incoming(1, "message-1")
    connection.acknowledge(PacketType.PUBREC, 1)  # success: still counted
    only_closed(
        connection.receive_data(publish5("a", qos=1, packet_id=2), 1.0),
        ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
    )
    connection, flows = accepted5(ServerLimits5(receive_maximum=1))
    connection.receive_data(publish5("a", qos=2, packet_id=1), 1.0)
    flows.hold_incoming(1, "message-1")
    connection.acknowledge(PacketType.PUBREC, 1)
    connection.receive_data(encode(PubRel(1), MQTT_5), 2.0)
    connection.acknowledge(PacketType.PUBCOMP, 1)
    assert connection.data_to_send() == b"\x50\x02\x00\x01\x70\x02\x00\x01"
    assert len(connection.receive_data(publish5("a", qos=1, packet_id=2), 3.0)) == 1
    assert not connection.closed


def test_a_pubrec_with_an_error_frees_a_place_in_the_receive_maximum() -> None:
    connection = _receive_maximum_2()
    connection.acknowledge(PacketType.PUBACK, 2)
    assert connection.receive_data(publish5("b", qos=2, packet_id=9), 1.0) == [
        MessageReceived(Publish("b", b"x", 2, packet_id=9))
    ]
    connection.acknowledge(PacketType.PUBREC, 9, ReasonCode.PAYLOAD_FORMAT_INVALID)
    assert connection.data_to_send() == b"\x40\x02\x00\x02\x50\x03\x00\x09\x99"
    assert len(connection.receive_data(publish5("a", qos=1, packet_id=3), 2.0)) == 1
    assert not connection.closed


@pytest.mark.parametrize(
    ("qos", "ack"), [(1, b"\x40\x03\x00\x07\x99"), (2, b"\x50\x03\x00\x07\x99")]
)
def test_a_payload_that_is_not_utf_8_is_refused_in_its_acknowledgement(
    qos: int, ack: bytes
) -> None:
    connection, _ = accepted5(ServerLimits5(receive_maximum=1))
    raw = publish5("a", b"\xff\xfe", qos, 7, properties=Properties(payload_format_indicator=1))
    assert connection.receive_data(raw, 1.0) == []
    assert connection.data_to_send() == ack
    assert not connection.closed
    # Answered: the Receive Maximum of 1 has room again.
    assert len(connection.receive_data(publish5("a", qos=qos, packet_id=8), 2.0)) == 1
    assert not connection.closed


def test_a_valid_utf_8_payload_is_received() -> None:
    connection, _ = accepted5()
    props = Properties(payload_format_indicator=1)
    raw = publish5("a", "é".encode(), 1, 7, properties=props)
    assert connection.receive_data(raw, 1.0) == [
        MessageReceived(Publish("a", "é".encode(), 1, packet_id=7, properties=props))
    ]
    # Indicator 0 (unspecified bytes): not checked.
    raw = publish5("a", b"\xff", properties=Properties(payload_format_indicator=0))
    assert len(connection.receive_data(raw, 1.0)) == 1


def test_a_qos_0_payload_that_is_not_utf_8_gets_disconnect_0x99() -> None:
    connection, _ = accepted5()
    raw = publish5("a", b"\xff", properties=Properties(payload_format_indicator=1))
    closed = only_closed(connection.receive_data(raw, 1.0), ReasonCode.PAYLOAD_FORMAT_INVALID)
    assert closed.reason == "the payload is not UTF-8, as its payload format indicator says"
    assert_disconnected(connection, closed)


# ---------------------------------------------------------------------------
# Outgoing PUBLISH

USER_PROPERTY = properties_without_length(Properties(user_properties=[("k", "v")]))


def test_deliver_writes_a_5_0_publish_with_the_properties() -> None:
    assert USER_PROPERTY == b"\x26\x00\x01k\x00\x01v"
    connection, flows = accepted5()
    packet_id = connection.deliver(b"a/b", b"hi", 1, False, "ref-1", 1.0, properties=USER_PROPERTY)
    assert packet_id == 1
    # 32, remaining 17: topic "a/b", id 1, property length 7, User Property k=v, "hi".
    raw = b"\x32\x11\x00\x03a/b\x00\x01\x07" + USER_PROPERTY + b"hi"
    assert connection.data_to_send() == raw
    assert raw == encode_publish5(b"a/b", b"hi", 1, False, False, 1, b"\x07" + USER_PROPERTY)
    assert decode5(raw) == [
        Publish("a/b", b"hi", 1, packet_id=1, properties=Properties(user_properties=[("k", "v")]))
    ]
    assert flows.outbound[1].properties == USER_PROPERTY
    # Without properties: a property length of 0.
    assert connection.deliver(b"t", b"", 2, True, "ref-2", 1.0) == 2
    assert connection.data_to_send() == b"\x35\x06\x00\x01t\x00\x02\x00"


def test_max_inflight_is_the_clients_receive_maximum_when_lower() -> None:
    flows = Flows(max_inflight=10)
    connection, _ = accepted5(flows=flows, properties=Properties(receive_maximum=3))
    assert flows.max_inflight == 3
    for _ in range(3):
        assert flows.has_window()
        connection.deliver(b"a", b"x", 1, False, None, 1.0)
    assert not flows.has_window()
    # A 5.0 client with a larger one: the configured window.
    connection.connection_lost()
    connection, _ = accepted5(
        flows=Flows(max_inflight=10), properties=Properties(receive_maximum=20)
    )
    assert connection.flows is not None and connection.flows.max_inflight == 10
    # Without a Receive Maximum: 65535, so the configured one.
    flows = Flows(max_inflight=10)
    accepted5(flows=flows)
    assert flows.max_inflight == 10


def test_max_inflight_goes_back_for_a_3_1_1_connection() -> None:
    flows = Flows(max_inflight=10)
    connection, _ = accepted5(flows=flows, properties=Properties(receive_maximum=2))
    assert flows.max_inflight == 2
    connection.connection_lost()
    connection = Connection(now=1.0, mqtt5=LIMITS)
    connection.receive_data(encode(Connect("c5", clean_session=False)), 1.0)
    connection.accept(True, flows, 1.0)
    assert flows.max_inflight == 10
    assert Flows().max_inflight == 65535


def test_a_message_beyond_the_clients_maximum_packet_size_is_not_delivered() -> None:
    connection, flows = accepted5(properties=Properties(maximum_packet_size=40))
    assert connection.deliver(b"a/b", b"p" * 100, 1, False, "big", 1.0) == 0
    assert flows.outbound == {}
    assert connection.data_to_send() == b""
    assert connection.send_publish(b"a/b", b"p" * 100, False, b"") is False
    assert connection.data_to_send() == b""
    # The properties count too.
    big = properties_without_length(Properties(user_properties=[("k", "v" * 30)]))
    assert connection.deliver(b"a/b", b"", 1, False, "props", 1.0, properties=big) == 0
    assert flows.outbound == {}
    # A small one goes, with the first packet id: none was used up.
    assert connection.deliver(b"a/b", b"p", 1, False, "small", 1.0) == 1
    assert decode5(connection.data_to_send()) == [Publish("a/b", b"p", 1, packet_id=1)]
    assert connection.send_publish(b"a/b", b"p", True, b"") is True
    assert connection.data_to_send() == b"\x31\x07\x00\x03a/b\x00p"
    assert not connection.closed


def test_a_publish_of_exactly_the_clients_maximum_packet_size_is_sent() -> None:
    """MQTT 5.0 [MQTT-3.1.2-25] drops only a packet "too large to send"; this one is 20
    bytes for a maximum of 20 (the client allows no topic alias), yet `fits` counts 26."""
    connection, _ = accepted5(properties=Properties(maximum_packet_size=20))
    raw = encode_publish5(b"t", b"p" * 14, 0, False, False, 0, b"\x00")
    assert len(raw) == 20
    assert connection.send_publish(b"t", b"p" * 14, False, b"") is True
    assert connection.data_to_send() == raw


def test_send_publish_writes_a_qos_0_5_0_publish() -> None:
    connection, flows = accepted5()
    assert connection.send_publish(b"a/b", b"hi", False, USER_PROPERTY) is True
    assert connection.data_to_send() == b"\x30\x0f\x00\x03a/b\x07" + USER_PROPERTY + b"hi"
    assert flows.outbound == {}


def _aliased() -> tuple[Connection, Flows]:
    return accepted5(properties=Properties(topic_alias_maximum=2))


def test_topic_aliases_toward_a_client_that_allows_two() -> None:
    connection, _ = _aliased()
    connection.deliver(b"a", b"1", 1, False, None, 1.0)
    # First: the topic and Topic Alias 1 (properties: 3 bytes).
    assert connection.data_to_send() == b"\x32\x0a\x00\x01a\x00\x01\x03\x23\x00\x011"
    connection.deliver(b"a", b"2", 1, False, None, 1.0)
    # Second: an empty topic and Topic Alias 1.
    assert connection.data_to_send() == b"\x32\x09\x00\x00\x00\x02\x03\x23\x00\x012"
    connection.deliver(b"b", b"3", 1, False, None, 1.0)
    connection.deliver(b"c", b"4", 1, False, None, 1.0)  # both aliases taken: none
    connection.deliver(b"c", b"5", 1, False, None, 1.0)
    assert connection.send_publish(b"b", b"6", False, b"") is True
    assert connection.send_publish(b"a", b"7", False, USER_PROPERTY) is True
    alias = Properties(topic_alias=2)
    assert written(connection) == [
        Publish("b", b"3", 1, packet_id=3, properties=alias),
        Publish("c", b"4", 1, packet_id=4),
        Publish("c", b"5", 1, packet_id=5),
        Publish("", b"6", properties=alias),
        Publish("", b"7", properties=Properties(user_properties=[("k", "v")], topic_alias=1)),
    ]


def test_no_topic_alias_toward_a_client_that_allows_none() -> None:
    connection, _ = accepted5()
    for _ in range(2):
        connection.deliver(b"a", b"1", 1, False, None, 1.0)
    assert written(connection) == [Publish("a", b"1", 1, packet_id=i) for i in (1, 2)]


def test_a_resend_carries_dup_the_topic_and_no_alias() -> None:
    connection, flows = _aliased()
    connection.deliver(b"a", b"1", 1, False, None, 1.0)
    connection.deliver(b"a", b"2", 2, False, None, 1.0, properties=USER_PROPERTY)
    connection.data_to_send()
    connection.resend_inflight(5.0)
    assert connection.data_to_send() == (
        b"\x3a\x07\x00\x01a\x00\x01\x001"  # QoS 1, DUP, no properties
        + b"\x3c\x0e\x00\x01a\x00\x02\x07"
        + USER_PROPERTY
        + b"2"
    )
    assert [inflight.sent_at for inflight in flows.outbound.values()] == [5.0, 5.0]
    # On a new connection of the session: the same, and the aliases start afresh.
    connection.connection_lost()
    connection = open5(properties=Properties(topic_alias_maximum=2))
    connection.accept(True, flows, 6.0)
    assert written(connection)[1:] == [
        Publish("a", b"1", 1, dup=True, packet_id=1),
        Publish(
            "a", b"2", 2, dup=True, packet_id=2, properties=Properties(user_properties=[("k", "v")])
        ),
    ]
    connection.deliver(b"a", b"3", 1, False, None, 7.0)
    assert written(connection) == [
        Publish("a", b"3", 1, packet_id=3, properties=Properties(topic_alias=1))
    ]


def test_publish_bytes_at_level_5() -> None:
    connection, flows = _aliased()
    packet_id = connection.deliver(
        b"a", b"1", 1, False, "ref", 1.0, send=False, properties=USER_PROPERTY
    )
    assert packet_id == 1
    assert connection.data_to_send() == b""
    assert flows.outbound[1].properties == USER_PROPERTY
    raw = connection.publish_bytes(1)
    assert raw == b"\x32\x11\x00\x01a\x00\x01\x0a" + USER_PROPERTY + b"\x23\x00\x01" + b"1"
    assert decode5(raw) == [
        Publish(
            "a",
            b"1",
            1,
            packet_id=1,
            properties=Properties(user_properties=[("k", "v")], topic_alias=1),
        )
    ]
    assert connection.receive_data(encode(PubAck(1), MQTT_5), 2.0) == [
        DeliveryAcknowledged(1, "ref")
    ]
    assert connection.publish_bytes(1) is None


def test_a_resumed_session_resends_no_more_than_the_clients_receive_maximum() -> None:
    """Three QoS 1 messages in flight from a connection with a larger window; the client comes
    back with Receive Maximum 2. MQTT 5.0 [MQTT-3.3.4-9]: "The Server MUST NOT send more than
    Receive Maximum QoS 1 and QoS 2 PUBLISH packets for which it has not received PUBACK,
    PUBCOMP, or PUBREC with a Reason Code of 128 or greater", and `accept` re-sends all."""
    connection, flows = accepted5(flows=Flows(max_inflight=10))
    for index in range(3):
        connection.deliver(b"a", bytes((index,)), 1, False, index, 1.0)
    connection.connection_lost()
    connection = open5(properties=Properties(receive_maximum=2))
    connection.accept(True, flows, 2.0)
    publishes = [packet for packet in written(connection) if isinstance(packet, Publish)]
    assert len(publishes) <= 2


def test_a_resumed_session_resends_nothing_beyond_the_clients_maximum_packet_size() -> None:
    """`deliver` checks `Peer5.fits`, but the re-send on a new connection does not, whose
    client may have lowered its Maximum Packet Size: a packet the client must treat as a
    protocol error (0x95)."""
    connection, flows = accepted5()
    connection.deliver(b"a", b"p" * 100, 1, False, "big", 1.0)
    connection.connection_lost()
    connection = open5(properties=Properties(maximum_packet_size=50))
    connection.accept(True, flows, 2.0)
    assert all(len(encode(packet, MQTT_5)) <= 50 for packet in written(connection))


def test_deliver_on_a_3_1_1_connection_of_a_5_0_server_is_3_1_1() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    connection.receive_data(encode(Connect("c4")), 0.0)
    connection.accept(False, Flows(), 0.0)
    connection.data_to_send()
    assert connection.deliver(b"a", b"x", 1, False, None, 1.0, properties=USER_PROPERTY) == 1
    assert connection.data_to_send() == b"\x32\x06\x00\x01a\x00\x01x"


# ---------------------------------------------------------------------------
# Acknowledgements


def test_acknowledge_with_a_reason_code_writes_the_3_byte_body() -> None:
    connection, _ = accepted5()
    connection.receive_data(publish5("a", qos=1, packet_id=5), 1.0)
    connection.acknowledge(PacketType.PUBACK, 5, ReasonCode.NOT_AUTHORIZED)
    assert connection.data_to_send() == b"\x40\x03\x00\x05\x87"
    connection.receive_data(publish5("a", qos=1, packet_id=6), 1.0)
    connection.acknowledge(PacketType.PUBACK, 6)
    assert connection.data_to_send() == b"\x40\x02\x00\x06"
    connection.receive_data(publish5("a", qos=1, packet_id=7), 1.0)
    connection.acknowledge(PacketType.PUBACK, 7, ReasonCode.NO_MATCHING_SUBSCRIBERS)
    assert written(connection) == [PubAck(7, 0x10)]
    connection.acknowledge(PacketType.PUBREL, 8, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
    connection.acknowledge(PacketType.PUBCOMP, 9, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
    assert connection.data_to_send() == b"\x62\x03\x00\x08\x92\x70\x03\x00\x09\x92"
    assert not connection.closed


def test_acknowledge_at_3_1_1_ignores_the_reason_code() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    connection.receive_data(encode(Connect("c4")), 0.0)
    connection.accept(False, Flows(), 0.0)
    connection.data_to_send()
    connection.acknowledge(PacketType.PUBACK, 5, ReasonCode.NOT_AUTHORIZED)
    assert connection.data_to_send() == b"\x40\x02\x00\x05"


def test_a_pubrec_with_an_error_ends_the_exchange() -> None:
    connection, flows = accepted5()
    assert connection.deliver(b"a", b"x", 2, False, "ref", 1.0) == 1
    connection.data_to_send()
    events = connection.receive_data(encode(PubRec(1, ReasonCode.QUOTA_EXCEEDED), MQTT_5), 2.0)
    assert events == [DeliveryAcknowledged(1, "ref")]
    assert flows.outbound == {}
    assert connection.data_to_send() == b""  # no PUBREL
    # A PUBCOMP for it now is of an unknown id: harmless.
    assert connection.receive_data(encode(PubComp(1), MQTT_5), 3.0) == []
    assert not connection.closed


def test_a_pubrec_with_a_success_code_continues_the_exchange() -> None:
    connection, flows = accepted5()
    connection.deliver(b"a", b"x", 2, False, "ref", 1.0)
    connection.data_to_send()
    events = connection.receive_data(
        encode(PubRec(1, ReasonCode.NO_MATCHING_SUBSCRIBERS), MQTT_5), 2.0
    )
    assert events == [DeliveryReceived(1, "ref")]
    assert 1 in flows.outbound
    assert connection.data_to_send() == b""  # the owner sends PUBREL
    connection.acknowledge(PacketType.PUBREL, 1)
    assert connection.data_to_send() == b"\x62\x02\x00\x01"
    assert connection.receive_data(encode(PubComp(1), MQTT_5), 3.0) == [
        DeliveryAcknowledged(1, "ref")
    ]
    assert flows.outbound == {}


def test_a_puback_with_an_error_still_completes_the_delivery() -> None:
    connection, flows = accepted5()
    connection.deliver(b"a", b"x", 1, False, "ref", 1.0)
    raw = encode(PubAck(1, ReasonCode.NOT_AUTHORIZED, Properties(reason_string="no")), MQTT_5)
    assert connection.receive_data(raw, 2.0) == [DeliveryAcknowledged(1, "ref")]
    assert flows.outbound == {}


# ---------------------------------------------------------------------------
# DISCONNECT from the client


def test_disconnect_0_is_graceful_and_discards_the_will() -> None:
    connection, _ = accepted5()
    events = connection.receive_data(b"\xe0\x00", 1.0)
    assert events == [
        DisconnectRequested(0, None),
        ConnectionClosed("client sent DISCONNECT", True, ReasonCode.NORMAL_DISCONNECTION),
    ]
    request = events[0]
    assert isinstance(request, DisconnectRequested)
    assert not request.keeps_will
    assert connection.closed
    assert connection.data_to_send() == b""


def test_disconnect_with_will_message_keeps_the_will() -> None:
    connection, _ = accepted5()
    events = connection.receive_data(b"\xe0\x01\x04", 1.0)
    assert events == [
        DisconnectRequested(0x04, None),
        ConnectionClosed(
            "client sent DISCONNECT (reason 0x04)", True, ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        ),
    ]
    request = events[0]
    assert isinstance(request, DisconnectRequested)
    assert request.keeps_will
    assert connection.data_to_send() == b""


def test_disconnect_with_an_error_code_keeps_the_will() -> None:
    connection, _ = accepted5()
    raw = encode(Disconnect(0x80, Properties(reason_string="oops")), MQTT_5)
    events = connection.receive_data(raw, 1.0)
    assert events[0] == DisconnectRequested(0x80, None)
    assert isinstance(events[0], DisconnectRequested) and events[0].keeps_will
    assert events[1] == ConnectionClosed(
        "client sent DISCONNECT (reason 0x80)", True, ReasonCode.UNSPECIFIED_ERROR
    )


def test_disconnect_setting_a_session_expiry_when_connect_had_0_gets_disconnect_0x82() -> None:
    connection, _ = accepted5()  # CONNECT without Session Expiry Interval: 0
    raw = encode(Disconnect(0, Properties(session_expiry_interval=300)), MQTT_5)
    assert raw == b"\xe0\x07\x00\x05\x11\x00\x00\x01\x2c"
    closed = only_closed(connection.receive_data(raw, 1.0), ReasonCode.PROTOCOL_ERROR)
    assert closed.reason == "DISCONNECT sets a session expiry interval, but CONNECT's was 0"
    assert_disconnected(connection, closed)


def test_disconnect_with_a_session_expiry_of_0_when_connect_had_0_is_fine() -> None:
    connection, _ = accepted5()
    raw = encode(Disconnect(0, Properties(session_expiry_interval=0)), MQTT_5)
    events = connection.receive_data(raw, 1.0)
    assert events[0] == DisconnectRequested(0, 0)
    assert isinstance(events[1], ConnectionClosed) and events[1].graceful


def test_disconnect_carries_the_new_session_expiry_interval() -> None:
    connection, _ = accepted5(properties=Properties(session_expiry_interval=60))
    raw = encode(Disconnect(0x04, Properties(session_expiry_interval=300)), MQTT_5)
    events = connection.receive_data(raw, 1.0)
    assert events == [
        DisconnectRequested(0x04, 300),
        ConnectionClosed(
            "client sent DISCONNECT (reason 0x04)", True, ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        ),
    ]
    assert connection.data_to_send() == b""


# ---------------------------------------------------------------------------
# SUBSCRIBE, UNSUBSCRIBE and their acknowledgements


def test_a_subscription_identifier_when_not_available_gets_disconnect_0xa1() -> None:
    connection, _ = accepted5()  # subscription_identifier_available=False
    packet = Subscribe(1, [("a/#", 1)], properties=Properties(subscription_identifiers=[5]))
    closed = only_closed(
        connection.receive_data(encode(packet, MQTT_5), 1.0),
        ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
    )
    assert closed.reason == "subscription identifiers are not available"
    assert_disconnected(connection, closed)


def test_a_subscription_identifier_when_available_is_reported() -> None:
    connection, _ = accepted5(ServerLimits5(subscription_identifier_available=True))
    packet = Subscribe(1, [("a/#", 1)], properties=Properties(subscription_identifiers=[5]))
    assert connection.receive_data(encode(packet, MQTT_5), 1.0) == [SubscribeRequested(packet)]
    # Without one: reported whatever the server offers.
    connection, _ = accepted5()
    packet = Subscribe(2, [("a/#", 0x06)])  # QoS 2, No Local
    assert connection.receive_data(encode(packet, MQTT_5), 1.0) == [SubscribeRequested(packet)]


def test_unsubscribe_is_reported_at_level_5() -> None:
    connection, _ = accepted5()
    packet = Unsubscribe(3, ["a/#", "b"], properties=Properties(user_properties=[("k", "v")]))
    assert connection.receive_data(encode(packet, MQTT_5), 1.0) == [UnsubscribeRequested(packet)]


def test_send_suback_and_unsuback_with_5_0_reason_codes() -> None:
    connection, _ = accepted5()
    connection.send(SubAck(1, [0x00, 0x01, 0x87]))
    # Packet id 1, property length 0, three reason codes.
    assert connection.data_to_send() == b"\x90\x06\x00\x01\x00\x00\x01\x87"
    connection.send(UnsubAck(2, [0x00, 0x11]))
    assert connection.data_to_send() == b"\xb0\x05\x00\x02\x00\x00\x11"
    connection.send(SubAck(3, [0xA1], Properties(reason_string="no")))
    assert written(connection) == [SubAck(3, [0xA1], Properties(reason_string="no"))]
