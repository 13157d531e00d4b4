"""The server-side `Connection` state machine, driven by plain function calls: CONNECT
handling, CONNACK codes, PING, DISCONNECT, timers and the QoS 1/2 flows in both directions."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from connection_helpers import (
    accepted,
    connect_packet,
    decode_sent,
    open_connection,
    sent_packets,
)
from packet_cases import CASES, MALFORMED_CASES, MQTT_3_1, MQTT_3_1_1, MalformedCase, PacketCase

from telemq.protocol import (
    ConnAck,
    Connect,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectRequested,
    ConnectReturnCode,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    Flows,
    InflightState,
    LocalProtocolError,
    MessageReceived,
    MessageReleased,
    Packet,
    PacketIdsExhausted,
    PingResp,
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
)

CONNACK_ACCEPTED = b"\x20\x02\x00\x00"
CONNACK_SESSION_PRESENT = b"\x20\x02\x01\x00"
PINGRESP = b"\xd0\x00"


def only_closed(events: Sequence[object]) -> ConnectionClosed:
    assert len(events) == 1
    assert isinstance(events[0], ConnectionClosed)
    return events[0]


def assert_dead(connection: Connection) -> None:
    """A closed connection ignores input and timers and writes nothing more."""
    connection.data_to_send()  # what was queued before the end may still be flushed
    assert connection.closed
    assert connection.state is ConnectionState.CLOSED
    assert connection.receive_data(b"\xc0\x00", 1000.0) == []
    assert connection.receive_data(encode(Publish("a", b"x")), 1000.0) == []
    assert connection.handle_timer(10_000.0) == []
    assert connection.next_timer() is None
    assert connection.connection_lost() == []
    connection.send(PingResp())
    assert connection.data_to_send() == b""


# ---------------------------------------------------------------------------
# CONNECT


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_connect_is_reported_and_accept_sends_connack(level: int) -> None:
    connection = Connection(now=0.0)
    assert connection.state is ConnectionState.AWAIT_CONNECT
    packet = connect_packet(level, "dev-7", keepalive=30)
    assert connection.receive_data(encode(packet), 0.0) == [ConnectRequested(packet)]
    assert connection.state is ConnectionState.CONNECTING
    assert connection.protocol_level == level
    assert connection.keepalive == 30
    assert connection.data_to_send() == b""  # the owner answers
    connection.accept(False, Flows(), 0.0)
    assert connection.data_to_send() == CONNACK_ACCEPTED
    assert not connection.closed


def test_accept_sets_session_present() -> None:
    connection = open_connection(MQTT_3_1_1, clean_session=False)
    connection.accept(True, Flows(), 0.0)
    assert connection.data_to_send() == CONNACK_SESSION_PRESENT


def test_accept_in_3_1_leaves_the_reserved_connack_byte_zero() -> None:
    """MQTT 3.1 has no session present flag: byte 1 of CONNACK is reserved (mq-reference
    §8.1), so even a resumed session is acknowledged with 20 02 00 00."""
    connection = open_connection(MQTT_3_1, clean_session=False)
    connection.accept(True, Flows(), 0.0)
    assert connection.data_to_send() == CONNACK_ACCEPTED


@pytest.mark.parametrize(
    "case",
    # Before CONNECT the 3.1.1 rules apply, so 3.1-only bytes would be malformed instead.
    [case for case in CASES if case.level == MQTT_3_1_1 and not isinstance(case.packet, Connect)],
    ids=lambda case: case.id,
)
def test_first_packet_must_be_connect(case: PacketCase) -> None:
    connection = Connection(now=0.0)
    closed = only_closed(connection.receive_data(case.raw, 1.0))
    assert "the first packet is not CONNECT" in closed.reason
    assert not closed.graceful
    assert connection.closed_reason == closed.reason
    assert connection.data_to_send() == b""
    assert_dead(connection)


def test_connect_split_across_reads() -> None:
    raw = encode(connect_packet())
    connection = Connection(now=0.0)
    for index in range(len(raw) - 1):
        assert connection.receive_data(raw[index : index + 1], 0.0) == []
    assert connection.receive_data(raw[-1:], 0.0) == [ConnectRequested(connect_packet())]


def test_second_connect_closes() -> None:
    connection, _ = accepted()
    closed = only_closed(connection.receive_data(encode(connect_packet()), 1.0))
    assert "a second CONNECT" in closed.reason
    assert not closed.graceful
    assert_dead(connection)


def test_second_connect_before_accept_closes_once_the_first_is_answered() -> None:
    connection = open_connection()
    assert connection.receive_data(encode(connect_packet()), 1.0) == []  # held
    connection.accept(False, Flows(), 1.0)
    closed = only_closed(connection.receive_data(b"", 1.0))
    assert "a second CONNECT" in closed.reason


@pytest.mark.parametrize(
    ("name", "level"), [(b"MQTT", 5), (b"MQTT", 6), (b"MQIsdp", 2), (b"MQTT", 0)]
)
def test_unsupported_protocol_level_gets_connack_1(name: bytes, level: int) -> None:
    body = len(name).to_bytes(2, "big") + name + bytes([level]) + b"\x02\x00\x3c\x00\x01c"
    connection = Connection(now=0.0)
    closed = only_closed(connection.receive_data(b"\x10" + bytes([len(body)]) + body, 0.0))
    assert f"unsupported protocol level {level}" in closed.reason
    assert not closed.graceful
    assert connection.data_to_send() == b"\x20\x02\x00\x01"
    assert_dead(connection)


def test_mqtt_5_connect_with_properties_gets_connack_1() -> None:
    body = b"\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x01c"  # properties length 0
    connection = Connection(now=0.0)
    only_closed(connection.receive_data(b"\x10" + bytes([len(body)]) + body, 0.0))
    assert connection.data_to_send() == b"\x20\x02\x00\x01"


@pytest.mark.parametrize("client_id", ["", "c" * 24, "\u00e9" * 24])
def test_3_1_client_identifier_rules_give_connack_2(client_id: str) -> None:
    connection = Connection(now=0.0)
    packet = connect_packet(MQTT_3_1, client_id)
    closed = only_closed(connection.receive_data(encode(packet), 0.0))
    assert "client identifier must be 1 to 23 characters" in closed.reason
    assert connection.data_to_send() == b"\x20\x02\x00\x02"
    assert_dead(connection)


@pytest.mark.parametrize("client_id", ["c", "c" * 23, "\u00e9" * 23])
def test_3_1_client_identifier_of_1_to_23_characters_is_accepted(client_id: str) -> None:
    connection = open_connection(MQTT_3_1, client_id=client_id)
    assert connection.state is ConnectionState.CONNECTING


def test_3_1_1_empty_client_identifier_with_clean_session_is_reported() -> None:
    connection = Connection(now=0.0)
    packet = connect_packet(MQTT_3_1_1, "", clean_session=True)
    assert connection.receive_data(encode(packet), 0.0) == [ConnectRequested(packet)]
    assert not connection.closed


def test_3_1_1_empty_client_identifier_without_clean_session_gets_connack_2() -> None:
    connection = Connection(now=0.0)
    packet = connect_packet(MQTT_3_1_1, "", clean_session=False)
    closed = only_closed(connection.receive_data(encode(packet), 0.0))
    assert "empty client identifier without clean session" in closed.reason
    assert connection.data_to_send() == b"\x20\x02\x00\x02"
    assert_dead(connection)


def test_3_1_1_long_client_identifier_is_accepted() -> None:
    assert open_connection(MQTT_3_1_1, client_id="x" * 200).state is ConnectionState.CONNECTING


@pytest.mark.parametrize(
    ("code", "raw"),
    [
        (ConnectReturnCode.SERVER_UNAVAILABLE, b"\x20\x02\x00\x03"),
        (ConnectReturnCode.BAD_USERNAME_OR_PASSWORD, b"\x20\x02\x00\x04"),
        (ConnectReturnCode.NOT_AUTHORIZED, b"\x20\x02\x00\x05"),
    ],
)
def test_refuse_sends_the_connack_code_and_closes(code: ConnectReturnCode, raw: bytes) -> None:
    connection = open_connection()
    closed = connection.refuse(code, "bad credentials")
    reason = {
        ConnectReturnCode.SERVER_UNAVAILABLE: ReasonCode.SERVER_UNAVAILABLE,
        ConnectReturnCode.BAD_USERNAME_OR_PASSWORD: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
        ConnectReturnCode.NOT_AUTHORIZED: ReasonCode.NOT_AUTHORIZED,
    }[code]
    assert closed == ConnectionClosed("bad credentials", False, reason)
    assert connection.data_to_send() == raw
    assert_dead(connection)


def test_malformed_connect_closes_without_connack() -> None:
    connection = Connection(now=0.0)
    raw = encode(connect_packet())
    closed = only_closed(connection.receive_data(raw[:-1] + b"\x00" + b"\x01", 0.0))
    assert closed.reason.startswith("malformed packet: ")
    assert connection.data_to_send() == b""


# ---------------------------------------------------------------------------
# Packets after CONNECT


def test_pingreq_gets_pingresp() -> None:
    connection, _ = accepted()
    assert connection.receive_data(b"\xc0\x00", 1.0) == []
    assert connection.data_to_send() == PINGRESP
    assert connection.receive_data(b"\xc0\x00\xc0\x00", 2.0) == []
    assert connection.data_to_send() == PINGRESP * 2


def test_subscribe_and_unsubscribe_are_reported() -> None:
    connection, _ = accepted()
    subscribe = Subscribe(3, [("a/+", 1), ("$SYS/#", 0)])
    unsubscribe = Unsubscribe(4, ["a/+"])
    events = connection.receive_data(encode(subscribe) + encode(unsubscribe), 1.0)
    assert events == [SubscribeRequested(subscribe), UnsubscribeRequested(unsubscribe)]
    connection.send(SubAck(3, [1, 0]))
    connection.send(UnsubAck(4))
    assert connection.data_to_send() == b"\x90\x04\x00\x03\x01\x00\xb0\x02\x00\x04"


def test_disconnect_is_graceful() -> None:
    connection, _ = accepted()
    events = connection.receive_data(b"\xe0\x00", 5.0)
    assert events == [
        DisconnectRequested(),
        ConnectionClosed("client sent DISCONNECT", True, ReasonCode.NORMAL_DISCONNECTION),
    ]
    assert connection.closed_reason == "client sent DISCONNECT"
    assert_dead(connection)


def test_bytes_after_disconnect_are_ignored() -> None:
    connection, _ = accepted()
    events = connection.receive_data(b"\xe0\x00\xc0\x00" + encode(Publish("a", b"x")), 5.0)
    assert [type(event) for event in events] == [DisconnectRequested, ConnectionClosed]
    assert connection.data_to_send() == b""


def test_bytes_after_disconnect_are_ignored_even_when_malformed() -> None:
    """After DISCONNECT the rest of the stream does not matter: the end stays graceful
    (the will is discarded) whether the trailing bytes arrive in the same read or not."""
    connection, _ = accepted()
    events = connection.receive_data(b"\xe0\x00" + b"\x00\x00", 5.0)
    assert events == [
        DisconnectRequested(),
        ConnectionClosed("client sent DISCONNECT", True, ReasonCode.NORMAL_DISCONNECTION),
    ]


def test_packets_before_a_malformed_one_in_the_same_read_are_handled() -> None:
    connection, _ = accepted()
    publish = Publish("a/b", b"x")
    events = connection.receive_data(encode(publish) + b"\xc0\x00" + b"\xf0\x00", 5.0)
    assert events[0] == MessageReceived(publish)
    closed = only_closed(events[1:])
    assert "reserved packet type 15" in closed.reason
    assert connection.data_to_send() == PINGRESP


@pytest.mark.parametrize(
    "packet",
    [ConnAck(), SubAck(1, [0]), UnsubAck(1), PingResp()],
    ids=lambda packet: packet.packet_type.name,
)
def test_packets_only_a_server_sends_close_the_connection(packet: Packet) -> None:
    connection, _ = accepted()
    closed = only_closed(connection.receive_data(encode(packet), 1.0))
    assert f"a client may not send {packet.packet_type.name}" in closed.reason
    assert not closed.graceful
    assert_dead(connection)


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda case: case.id)
def test_malformed_packet_closes_with_the_reason(case: MalformedCase) -> None:
    connection, _ = accepted(case.level)
    closed = only_closed(connection.receive_data(case.raw, 1.0))
    assert closed.code == case.reason
    # "malformed packet: ...", or "protocol error: ..." for one that parses (packet id 0).
    assert closed.reason.startswith(f"{closed.code.name.lower().replace('_', ' ')}: ")
    assert case.message in closed.reason
    assert not closed.graceful
    assert connection.data_to_send() == b""
    assert_dead(connection)


def test_oversized_packet_closes_from_its_header() -> None:
    connection, _ = accepted(max_packet_size=1024)
    closed = only_closed(connection.receive_data(b"\x30\xff\xff\x7f", 1.0))
    assert "exceeds the maximum packet size of 1024 bytes" in closed.reason
    assert closed.code is ReasonCode.PACKET_TOO_LARGE


def test_default_max_packet_size_is_one_mebibyte() -> None:
    connection, _ = accepted()
    header = b"\x30\x80\x80\x40"  # remaining length 1 MiB: 1 MiB + 4 bytes in all
    closed = only_closed(connection.receive_data(header, 1.0))
    assert "exceeds the maximum packet size of 1048576 bytes" in closed.reason


def test_close_and_connection_lost_are_abnormal_ends() -> None:
    connection, _ = accepted()
    assert connection.close("shutting down") == ConnectionClosed(
        "shutting down", False, ReasonCode.ADMINISTRATIVE_ACTION
    )
    assert connection.close("again", ReasonCode.SESSION_TAKEN_OVER) == ConnectionClosed(
        "again", False, ReasonCode.SESSION_TAKEN_OVER
    )
    assert_dead(connection)
    connection, _ = accepted()
    assert connection.connection_lost() == [ConnectionClosed("connection lost", graceful=False)]
    assert_dead(connection)


def test_byte_counters() -> None:
    connection, _ = accepted()
    sent_before = connection.bytes_sent
    connection.receive_data(b"\xc0\x00", 1.0)
    assert connection.bytes_received == len(encode(connect_packet())) + 2
    connection.data_to_send()
    assert connection.bytes_sent == sent_before + 2


# ---------------------------------------------------------------------------
# Packets pipelined after CONNECT, in the same read


def test_pingreq_pipelined_with_connect_is_answered_after_the_connack() -> None:
    """The first packet a server sends must be CONNACK [MQTT-3.2.0-1], even when the
    client pipelines a PINGREQ behind its CONNECT."""
    connection = Connection(now=0.0)
    events = connection.receive_data(encode(connect_packet()) + b"\xc0\x00", 0.0)
    assert events == [ConnectRequested(connect_packet())]
    connection.accept(False, Flows(), 0.0)
    events += connection.receive_data(b"", 0.0)
    assert connection.data_to_send() == CONNACK_ACCEPTED + PINGRESP


def test_qos_2_duplicate_pipelined_with_connect_is_detected() -> None:
    """A resumed session's held QoS 2 message re-sent right behind CONNECT must still be
    flagged as a duplicate, or it is accepted twice."""
    flows = Flows()
    flows.hold_incoming(7, "stored message 7")
    retry = Publish("a/b", b"x", qos=2, dup=True, packet_id=7)
    packet = connect_packet(clean_session=False)
    connection = Connection(now=0.0)
    events = connection.receive_data(encode(packet) + encode(retry), 0.0)
    assert events[0] == ConnectRequested(packet)
    connection.accept(True, flows, 0.0)
    events += connection.receive_data(b"", 0.0)
    assert events[1:] == [MessageReceived(retry, duplicate=True)]


# ---------------------------------------------------------------------------
# Timers


def test_partial_bytes_of_a_packet_do_not_reset_keepalive() -> None:
    """A client trickling a packet one byte at a time is not alive: only complete control
    packets count [MQTT-3.1.2-24]."""
    connection, _ = accepted(now=100.0, keepalive=10)
    publish = encode(Publish("t", b"x" * 20, 0))
    for offset, byte in enumerate(publish[:-1]):
        assert connection.receive_data(bytes([byte]), 101.0 + offset) == []
    assert connection.last_received == 100.0
    assert connection.next_timer() == 115.0
    closed = only_closed(connection.handle_timer(115.0))
    assert closed.code is ReasonCode.KEEP_ALIVE_TIMEOUT
    connection, _ = accepted(now=100.0, keepalive=10)
    connection.receive_data(publish[:-1], 101.0)
    connection.receive_data(publish[-1:], 112.0)  # the packet is complete: that counts
    assert connection.last_received == 112.0


def test_keepalive_deadline_is_one_and_a_half_times_the_keepalive() -> None:
    connection, _ = accepted(now=100.0, keepalive=60)
    assert connection.next_timer() == 190.0
    assert connection.handle_timer(189.0) == []
    assert not connection.closed
    connection.receive_data(b"\xc0\x00", 150.0)
    assert connection.last_received == 150.0
    assert connection.next_timer() == 240.0
    assert connection.handle_timer(239.5) == []
    closed = only_closed(connection.handle_timer(240.0))
    assert "keep-alive expired" in closed.reason
    assert not closed.graceful
    assert_dead(connection)


def test_half_a_packet_does_not_reset_the_keepalive() -> None:
    connection, _ = accepted(now=0.0, keepalive=10)
    connection.receive_data(b"\xc0", 14.0)  # half a PINGREQ
    assert connection.next_timer() == 15.0
    connection.receive_data(b"\x00", 14.5)  # the rest of it: a control packet
    assert connection.next_timer() == 29.5


def test_keepalive_expiry_handled_late_still_closes() -> None:
    connection, _ = accepted(now=0.0, keepalive=1)
    only_closed(connection.handle_timer(1_000_000.0))


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_keepalive_zero_means_no_timer(level: int) -> None:
    connection, _ = accepted(level, keepalive=0)
    assert connection.next_timer() is None
    assert connection.handle_timer(1_000_000.0) == []
    assert not connection.closed


def test_connect_timeout() -> None:
    connection = Connection(now=5.0, connect_timeout=10.0)
    assert connection.next_timer() == 15.0
    assert connection.receive_data(b"\x10\x0e\x00", 12.0) == []  # part of a CONNECT
    assert connection.next_timer() == 15.0
    assert connection.handle_timer(14.9) == []
    closed = only_closed(connection.handle_timer(15.0))
    assert "no CONNECT within the connect timeout" in closed.reason
    assert not closed.graceful
    assert_dead(connection)


def test_connect_timeout_stops_after_connect() -> None:
    connection = open_connection(now=5.0, keepalive=0, connect_timeout=10.0)
    assert connection.next_timer() is None
    assert connection.handle_timer(100.0) == []
    assert not connection.closed


# ---------------------------------------------------------------------------
# Inbound QoS flows (client -> server): the owner acknowledges


def test_inbound_qos_0() -> None:
    connection, _ = accepted()
    publish = Publish("a/b", b"hello")
    assert connection.receive_data(encode(publish), 1.0) == [MessageReceived(publish)]
    assert connection.data_to_send() == b""


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_inbound_qos_1(level: int) -> None:
    connection, _ = accepted(level)
    publish = Publish("a/b", b"hello", qos=1, packet_id=10)
    assert connection.receive_data(encode(publish), 1.0) == [MessageReceived(publish)]
    assert connection.data_to_send() == b""  # PUBACK only once the message is durable
    connection.send(PubAck(10))
    assert connection.data_to_send() == b"\x40\x02\x00\x0a"
    # A retry with DUP is reported again (at least once).
    retry = Publish("a/b", b"hello", qos=1, dup=True, packet_id=10)
    assert connection.receive_data(encode(retry), 2.0) == [MessageReceived(retry)]


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_inbound_qos_2(level: int) -> None:
    connection, flows = accepted(level)
    publish = Publish("a/b", b"once", qos=2, packet_id=42)
    assert connection.receive_data(encode(publish), 1.0) == [MessageReceived(publish)]
    flows.hold_incoming(42, "stored message 42")
    connection.send(PubRec(42))
    assert connection.data_to_send() == b"\x50\x02\x00\x2a"

    retry = Publish("a/b", b"once", qos=2, dup=True, packet_id=42)
    assert connection.receive_data(encode(retry), 2.0) == [MessageReceived(retry, duplicate=True)]
    connection.send(PubRec(42))
    connection.data_to_send()

    assert connection.receive_data(b"\x62\x02\x00\x2a", 3.0) == [
        MessageReleased(42, "stored message 42")
    ]
    assert not flows.is_held(42)
    connection.send(PubComp(42))
    assert connection.data_to_send() == b"\x70\x02\x00\x2a"
    # PUBREL retried after a lost PUBCOMP: the message is not released twice.
    assert connection.receive_data(b"\x62\x02\x00\x2a", 4.0) == [MessageReleased(42, None)]
    # The id is free again: a new message with it is not a duplicate.
    again = Publish("a/b", b"new", qos=2, packet_id=42)
    assert connection.receive_data(encode(again), 5.0) == [MessageReceived(again)]


def test_inbound_qos_2_held_across_a_reconnection() -> None:
    flows = Flows()
    connection, _ = accepted(flows=flows)
    publish = Publish("a/b", b"once", qos=2, packet_id=9)
    connection.receive_data(encode(publish), 1.0)
    flows.hold_incoming(9, "stored message 9")
    connection.connection_lost()

    connection, _ = accepted(flows=flows, session_present=True, now=10.0)
    retry = Publish("a/b", b"once", qos=2, dup=True, packet_id=9)
    assert connection.receive_data(encode(retry), 11.0) == [MessageReceived(retry, True)]
    assert connection.receive_data(encode(PubRel(9)), 12.0) == [
        MessageReleased(9, "stored message 9")
    ]


def test_inbound_qos_1_is_never_flagged_duplicate() -> None:
    connection, flows = accepted()
    flows.hold_incoming(5, "held QoS 2 message")
    publish = Publish("a", b"", qos=1, dup=True, packet_id=5)
    assert connection.receive_data(encode(publish), 1.0) == [MessageReceived(publish, False)]


# ---------------------------------------------------------------------------
# Outbound QoS flows (server -> client)


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_outbound_qos_1(level: int) -> None:
    connection, flows = accepted(level)
    packet_id = connection.deliver(b"a/b", b"payload", 1, False, "ref-1", 1.0)
    assert packet_id == 1
    raw = connection.data_to_send()
    assert raw == b"\x32\x0e\x00\x03a/b\x00\x01payload"
    assert decode_sent(raw, level) == [Publish("a/b", b"payload", qos=1, packet_id=1)]
    assert list(flows.outbound) == [1]

    assert connection.receive_data(encode(PubAck(1)), 2.0) == [DeliveryAcknowledged(1, "ref-1")]
    assert flows.outbound == {}
    assert connection.data_to_send() == b""
    # A repeated or unknown PUBACK is ignored.
    assert connection.receive_data(encode(PubAck(1)), 3.0) == []
    assert connection.receive_data(encode(PubAck(999)), 3.0) == []
    assert not connection.closed


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_outbound_qos_2(level: int) -> None:
    connection, flows = accepted(level)
    packet_id = connection.deliver(b"a/b", b"x", 2, True, "ref-2", 1.0)
    assert sent_packets(connection) == [
        Publish("a/b", b"x", qos=2, retain=True, packet_id=packet_id)
    ]
    # (A PUBACK here would close the connection: see the wrong-kind test below.)
    assert connection.receive_data(encode(PubRec(packet_id)), 2.0) == [
        DeliveryReceived(packet_id, "ref-2")
    ]
    assert flows.outbound[packet_id].state is InflightState.RELEASED
    # The owner sends PUBREL once the released state is durable.
    assert connection.data_to_send() == b""
    connection.send(PubRel(packet_id))
    assert connection.data_to_send() == b"\x62\x02" + packet_id.to_bytes(2, "big")

    assert connection.receive_data(encode(PubComp(packet_id)), 3.0) == [
        DeliveryAcknowledged(packet_id, "ref-2")
    ]
    assert flows.outbound == {}
    assert connection.receive_data(encode(PubComp(packet_id)), 4.0) == []


def test_duplicate_pubrec_is_reported_again_for_another_pubrel() -> None:
    connection, flows = accepted()
    packet_id = connection.deliver(b"t", b"", 2, False, "ref", 1.0)
    connection.data_to_send()
    for now in (2.0, 3.0):
        assert connection.receive_data(encode(PubRec(packet_id)), now) == [
            DeliveryReceived(packet_id, "ref")
        ]
        assert connection.data_to_send() == b""
    assert flows.outbound[packet_id].state is InflightState.RELEASED
    assert flows.outbound[packet_id].sent_at == 3.0


def test_pubrec_for_an_unknown_id_still_gets_pubrel() -> None:
    """So that a peer stuck in a flow the session no longer knows can complete it."""
    connection, _ = accepted()
    assert connection.receive_data(encode(PubRec(77)), 1.0) == []
    assert connection.data_to_send() == b"\x62\x02\x00\x4d"
    # Unknown ids of PUBACK and PUBCOMP (a finished flow's re-sent answer) are ignored.
    assert connection.receive_data(encode(PubAck(78)) + encode(PubComp(79)), 2.0) == []
    assert connection.state is ConnectionState.CONNECTED


@pytest.mark.parametrize(
    ("qos", "answers", "reason"),
    [
        (1, [PubRec], "PUBREC for packet id 1, a QoS 1 message published"),
        (1, [PubComp], "PUBCOMP for packet id 1, a QoS 1 message published"),
        (2, [PubAck], "PUBACK for packet id 1, a QoS 2 message published"),
        (2, [PubComp], "PUBCOMP for packet id 1, a QoS 2 message published"),
        (2, [PubRec, PubAck], "PUBACK for packet id 1, a QoS 2 message awaiting PUBCOMP"),
    ],
)
def test_an_acknowledgement_of_the_wrong_kind_for_an_id_in_flight_closes_the_connection(
    qos: int, answers: list[type[PubAck | PubRec | PubComp]], reason: str
) -> None:
    """A PUBREC or PUBCOMP in a QoS 1 exchange, a PUBACK in a QoS 2 one, a PUBCOMP before
    the PUBREC: a protocol error (MQTT 3.1.1 §4.3, §4.8), as Mosquitto treats it."""
    connection, flows = accepted()
    packet_id = connection.deliver(b"t", b"", qos, False, "ref", 1.0)
    connection.data_to_send()
    events: list[object] = []
    for answer in answers:
        events += connection.receive_data(encode(answer(packet_id)), 2.0)
    assert events[-1] == ConnectionClosed(reason, False, ReasonCode.PROTOCOL_ERROR)
    assert connection.closed
    assert packet_id in flows.outbound  # the session keeps it: re-sent on reconnection


def test_deliveries_get_fresh_ids() -> None:
    connection, _ = accepted()
    ids = [connection.deliver(b"t", bytes([n]), 1 + n % 2, False, n, 1.0) for n in range(5)]
    assert ids == [1, 2, 3, 4, 5]
    assert sent_packets(connection) == [
        Publish("t", bytes([n]), qos=1 + n % 2, packet_id=ids[n]) for n in range(5)
    ]


def test_deliver_before_accept_is_a_local_error() -> None:
    connection = open_connection()
    with pytest.raises(LocalProtocolError, match="before accept"):
        connection.deliver(b"t", b"", 1, False, None, 0.0)


def test_deliver_qos_0_is_a_local_error() -> None:
    connection, _ = accepted()
    with pytest.raises(LocalProtocolError, match="not QoS 0"):
        connection.deliver(b"t", b"", 0, False, None, 0.0)


def test_deliver_on_a_closed_connection_is_kept_for_the_next_one() -> None:
    connection, flows = accepted()
    connection.connection_lost()
    packet_id = connection.deliver(b"t", b"x", 1, False, "later", 1.0)
    assert connection.data_to_send() == b""
    assert flows.outbound[packet_id].ref == "later"


def test_has_window_follows_the_deliveries() -> None:
    connection, flows = accepted(flows=Flows(max_inflight=2))
    connection.deliver(b"t", b"", 1, False, "a", 1.0)
    assert flows.has_window()
    connection.deliver(b"t", b"", 2, False, "b", 1.0)
    assert not flows.has_window()
    connection.receive_data(encode(PubAck(1)), 2.0)
    assert flows.has_window()


def test_packet_id_exhaustion_on_a_connection() -> None:
    connection, flows = accepted(flows=Flows(max_inflight=0))
    ids = {connection.deliver(b"t", b"", 1, False, None, 1.0) for _ in range(65535)}
    assert ids == set(range(1, 65536))
    with pytest.raises(PacketIdsExhausted):
        connection.deliver(b"t", b"", 1, False, None, 1.0)
    assert len(flows.outbound) == 65535
    connection.receive_data(encode(PubAck(300)), 2.0)
    connection.data_to_send()
    assert connection.deliver(b"t", b"", 1, False, None, 3.0) == 300


# ---------------------------------------------------------------------------
# Resending on reconnection, and MQTT 3.1 retries


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_reconnection_resends_in_flight_messages_in_order_with_dup(level: int) -> None:
    flows = Flows()
    first, _ = accepted(level, flows=flows)
    id_a = first.deliver(b"a", b"1", 2, False, "A", 1.0)  # will be released
    id_b = first.deliver(b"b", b"2", 1, True, "B", 1.0)
    id_c = first.deliver(b"c", b"3", 2, False, "C", 1.0)
    assert first.receive_data(encode(PubRec(id_a)), 2.0) == [DeliveryReceived(id_a, "A")]
    first.send(PubRel(id_a))
    first.data_to_send()
    assert first.connection_lost() == [ConnectionClosed("connection lost")]

    second = open_connection(level, now=10.0, clean_session=False)
    second.accept(level == MQTT_3_1_1, flows, 10.0)
    raw = second.data_to_send()
    session_present = b"\x01" if level == MQTT_3_1_1 else b"\x00"
    assert raw == (
        b"\x20\x02" + session_present + b"\x00"
        + b"\x62\x02" + id_a.to_bytes(2, "big")  # PUBREL (the PUBLISH was acknowledged)
        + b"\x3b\x06\x00\x01b" + id_b.to_bytes(2, "big") + b"2"  # DUP, QoS 1, RETAIN
        + b"\x3c\x06\x00\x01c" + id_c.to_bytes(2, "big") + b"3"  # DUP, QoS 2
    )  # fmt: skip
    assert decode_sent(raw, level)[1:] == [
        PubRel(id_a),
        Publish("b", b"2", qos=1, retain=True, dup=True, packet_id=id_b),
        Publish("c", b"3", qos=2, dup=True, packet_id=id_c),
    ]
    # The flows complete on the new connection.
    assert second.receive_data(encode(PubComp(id_a)), 11.0) == [DeliveryAcknowledged(id_a, "A")]
    assert second.receive_data(encode(PubAck(id_b)), 11.0) == [DeliveryAcknowledged(id_b, "B")]
    assert second.receive_data(encode(PubRec(id_c)), 11.0) == [DeliveryReceived(id_c, "C")]
    assert second.receive_data(encode(PubComp(id_c)), 11.0) == [DeliveryAcknowledged(id_c, "C")]
    assert flows.outbound == {}


def test_reconnection_without_flows_in_flight_sends_only_connack() -> None:
    flows = Flows()
    first, _ = accepted(flows=flows)
    first.deliver(b"a", b"", 1, False, "A", 1.0)
    first.receive_data(encode(PubAck(1)), 2.0)
    first.connection_lost()
    second = open_connection(clean_session=False)
    second.accept(True, flows, 3.0)
    assert second.data_to_send() == CONNACK_SESSION_PRESENT


def test_resend_inflight_can_be_called_by_the_owner() -> None:
    connection, _ = accepted()
    packet_id = connection.deliver(b"a", b"x", 1, False, "A", 1.0)
    connection.data_to_send()
    connection.resend_inflight(2.0)
    assert sent_packets(connection) == [Publish("a", b"x", qos=1, dup=True, packet_id=packet_id)]


def test_3_1_retries_unacknowledged_messages_after_the_retry_interval() -> None:
    connection, flows = accepted(MQTT_3_1, keepalive=0, retry_interval=20.0)
    assert connection.next_timer() is None
    id_1 = connection.deliver(b"t", b"1", 1, False, "one", 1.0)
    id_2 = connection.deliver(b"t", b"2", 2, False, "two", 5.0)
    connection.data_to_send()
    assert connection.next_timer() == 21.0
    assert connection.handle_timer(20.0) == []
    assert connection.data_to_send() == b""

    assert connection.handle_timer(21.0) == []
    assert sent_packets(connection) == [Publish("t", b"1", qos=1, dup=True, packet_id=id_1)]
    assert connection.next_timer() == 25.0
    assert connection.handle_timer(25.0) == []
    assert sent_packets(connection) == [Publish("t", b"2", qos=2, dup=True, packet_id=id_2)]
    assert connection.next_timer() == 41.0

    # PUBREC moves the QoS 2 flow on (the owner answers PUBREL); the next retry is a PUBREL.
    assert connection.receive_data(encode(PubRec(id_2)), 30.0) == [DeliveryReceived(id_2, "two")]
    assert connection.data_to_send() == b""
    connection.send(PubRel(id_2))
    assert sent_packets(connection) == [PubRel(id_2)]
    assert connection.receive_data(encode(PubAck(id_1)), 31.0) == [
        DeliveryAcknowledged(id_1, "one")
    ]
    assert connection.next_timer() == 50.0
    assert connection.handle_timer(50.0) == []
    assert sent_packets(connection) == [PubRel(id_2)]
    connection.receive_data(encode(PubComp(id_2)), 51.0)
    assert flows.outbound == {}
    assert connection.next_timer() is None
    assert connection.handle_timer(100.0) == []
    assert connection.data_to_send() == b""


def test_3_1_retry_and_keepalive_share_the_timer() -> None:
    connection, _ = accepted(MQTT_3_1, keepalive=60, retry_interval=20.0)
    assert connection.next_timer() == 90.0
    connection.deliver(b"t", b"1", 1, False, "one", 1.0)
    assert connection.next_timer() == 21.0


def test_3_1_1_has_no_time_based_retry() -> None:
    connection, _ = accepted(MQTT_3_1_1, keepalive=0, retry_interval=20.0)
    connection.deliver(b"t", b"1", 1, False, "one", 1.0)
    connection.data_to_send()
    assert connection.next_timer() is None
    assert connection.handle_timer(1000.0) == []
    assert connection.data_to_send() == b""


def test_3_1_retry_interval_zero_disables_retries() -> None:
    connection, _ = accepted(MQTT_3_1, keepalive=0, retry_interval=0.0)
    connection.deliver(b"t", b"1", 1, False, "one", 1.0)
    connection.data_to_send()
    assert connection.next_timer() is None
    assert connection.handle_timer(1000.0) == []
    assert connection.data_to_send() == b""


def test_deliver_without_sending_tracks_the_id_and_publish_bytes_sends_it_later() -> None:
    """The owner of a durable QoS 2 delivery writes the PUBLISH once its id is stored."""
    connection, flows = accepted()
    packet_id = connection.deliver(b"a/b", b"x", 2, False, "ref", 1.0, send=False)
    assert connection.data_to_send() == b""
    assert packet_id in flows.outbound
    frame = connection.publish_bytes(packet_id)
    assert frame is not None
    assert decode_sent(frame) == [Publish("a/b", b"x", 2, False, False, packet_id)]
    # Once PUBREC moved it on, the first PUBLISH is no longer what to send.
    connection.receive_data(encode(PubRec(packet_id)), 2.0)
    assert connection.publish_bytes(packet_id) is None
    assert connection.publish_bytes(packet_id + 1) is None
