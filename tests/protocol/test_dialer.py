"""`DialConnection`, the client role of a broker that dials another, wired in memory to a
server-side `Connection`: what one writes (`data_to_send()`) is what the other reads
(`receive_data`), and each side's owner is played by the test (`accept`/`refuse` on the
server, `attach` on the dialer, the acknowledgements of QoS 1/2 on both).

Covered, at 3.1.1 and 5.0: CONNECT/CONNACK and session present, refusals, QoS 0/1/2 both
ways through `Flows`, the re-sends of a resumed session (DUP=1 PUBLISH, PUBREL) in both
directions, the bytes that follow CONNACK waiting for `attach`, keep-alive (PINGREQ after
silence, the close when the server does not answer, Server Keep Alive), the CONNACK
timeout, SUBSCRIBE/SUBACK and UNSUBSCRIBE/UNSUBACK with 5.0 subscription options, the
server's DISCONNECT, the 5.0 limits both ways (Receive Maximum, topic aliases), protocol
errors (PUBLISH before CONNACK, packets a server never sends), and the private bridge
levels 0x83/0x84 (golden bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from telemq.protocol import (
    Auth,
    ConnAck,
    Connect,
    ConnectAcknowledged,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectRequested,
    ConnectReturnCode,
    Decoder,
    DeliveryAcknowledged,
    DeliveryReceived,
    DialConnection,
    Disconnect,
    DisconnectRequested,
    Event,
    Flows,
    InflightState,
    LocalProtocolError,
    MessageReceived,
    MessageReleased,
    Packet,
    PacketType,
    PingReq,
    Properties,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscribeAcknowledged,
    SubscribeRequested,
    UnsubAck,
    Unsubscribe,
    UnsubscribeAcknowledged,
    UnsubscribeRequested,
    encode,
    encode_publish,
    subscription_options,
)
from telemq.protocol.peer5 import ServerLimits5

MQTT_3_1 = 3
MQTT_3_1_1 = 4
MQTT_5 = 5
LEVELS = [MQTT_3_1_1, MQTT_5]
PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"

# The accepting server's limits, and the dialer's own (what it states in its CONNECT).
SERVER_LIMITS = ServerLimits5(receive_maximum=10, maximum_packet_size=4096, topic_alias_maximum=4)
DIAL_LIMITS = ServerLimits5(receive_maximum=20, topic_alias_maximum=5)
DIAL_MAX_PACKET = 8192


# ---------------------------------------------------------------------------
# Helpers


class Wire:
    """A `DialConnection` and a server-side `Connection`, joined in memory."""

    def __init__(
        self,
        level: int = MQTT_3_1_1,
        *,
        keepalive: int = 60,
        clean: bool = True,
        bridge: bool = False,
        properties: Properties | None = None,
        username: str | None = None,
        password: bytes | None = None,
        server_limits: ServerLimits5 = SERVER_LIMITS,
        now: float = 0.0,
        **options: Any,
    ) -> None:
        self.level = level
        self.now = now
        self.connect = Connect(
            "bridge-1",
            level,
            clean,
            keepalive,
            username=username,
            password=password,
            protocol_name="MQIsdp" if level == MQTT_3_1 else "MQTT",
            properties=properties,
        )
        self.server = Connection(now=now, mqtt5=server_limits)
        if level == MQTT_5:
            options.setdefault("mqtt5", DIAL_LIMITS)
            options.setdefault("max_packet_size", DIAL_MAX_PACKET)
        self.dialer = DialConnection(self.connect, now=now, bridge=bridge, **options)

    def to_server(self) -> list[Event]:
        return self.server.receive_data(self.dialer.data_to_send(), self.now)

    def to_dialer(self) -> list[Event]:
        return self.dialer.receive_data(self.server.data_to_send(), self.now)

    def handshake(
        self,
        dialer_flows: Flows,
        server_flows: Flows,
        *,
        session_present: bool = False,
    ) -> tuple[list[Event], list[Event]]:
        """CONNECT, CONNACK, `attach`: returns what the server and the dialer reported after
        the CONNECT and the CONNACK (the re-sends of a resumed session)."""
        (requested,) = self.to_server()
        assert isinstance(requested, ConnectRequested)
        self.server.accept(session_present, server_flows, self.now)
        acknowledged = self.to_dialer()
        assert len(acknowledged) == 1, acknowledged
        event = acknowledged[0]
        assert isinstance(event, ConnectAcknowledged)
        assert (event.return_code, event.session_present) == (0, session_present)
        assert state_of(self.dialer) is ConnectionState.CONNECTING
        assert self.dialer.attach(dialer_flows, self.now) == []
        assert state_of(self.dialer) is ConnectionState.CONNECTED
        to_dialer = self.dialer.receive_data(b"", self.now)  # what came with the CONNACK
        return self.to_server(), to_dialer


def connected(level: int = MQTT_3_1_1, **options: Any) -> tuple[Wire, Flows, Flows]:
    """A wire whose handshake is over; returns it with the dialer's and the server's flows."""
    wire = Wire(level, **options)
    dialer_flows, server_flows = Flows(), Flows()
    assert wire.handshake(dialer_flows, server_flows) == ([], [])
    return wire, dialer_flows, server_flows


def decode(data: bytes, level: int) -> list[Packet]:
    decoder = Decoder(protocol_level=level, mqtt5=True)
    packets = decoder.feed(data)
    assert decoder.buffered == 0
    return packets


def written(connection: Connection) -> list[Packet]:
    return decode(connection.data_to_send(), connection.protocol_level)


def arrivals(events: Sequence[Event]) -> list[tuple[str, bytes, int, bool, bool, int]]:
    """The PUBLISHes received, without their properties (at 5.0 an empty block where a
    topic alias was taken off)."""
    out = []
    for event in events:
        assert isinstance(event, MessageReceived), event
        p = event.publish
        out.append((p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id))
    return out


def state_of(connection: Connection) -> ConnectionState:
    """The state, read anew (not narrowed by an earlier assertion on it)."""
    return connection.state


def only_closed(events: Sequence[Event], code: ReasonCode, reason: str) -> None:
    assert events == [ConnectionClosed(reason, False, code)]


def assert_disconnected(dialer: DialConnection, code: int, reason: str) -> None:
    """At 5.0 the dialer wrote one DISCONNECT with `code` and the reason; it is closed and
    reads nothing more."""
    assert written(dialer) == [Disconnect(code, Properties(reason_string=reason))]
    assert dialer.closed
    assert dialer.receive_data(PINGRESP, 99.0) == []


# ---------------------------------------------------------------------------
# CONNECT and CONNACK


@pytest.mark.parametrize("level", [MQTT_3_1, MQTT_3_1_1])
def test_connect_and_connack(level: int) -> None:
    wire = Wire(level, keepalive=30, clean=False, username="link", password=b"secret")
    dialer = wire.dialer
    assert dialer.state is ConnectionState.AWAIT_CONNACK
    assert dialer.protocol_level == level
    assert wire.to_server() == [ConnectRequested(wire.connect)]
    wire.server.accept(True, Flows(), 0.0)
    # MQTT 3.1 has no session present flag.
    present = level == MQTT_3_1_1
    assert wire.to_dialer() == [ConnectAcknowledged(0, present, None)]
    assert state_of(dialer) is ConnectionState.CONNECTING
    assert dialer.flows is None
    flows = Flows(max_inflight=5)
    assert dialer.attach(flows, 0.0) == []
    assert state_of(dialer) is ConnectionState.CONNECTED
    assert dialer.flows is flows
    assert flows.connection_number == 1
    assert flows.max_inflight == 5
    assert dialer.keepalive == 30
    assert dialer.data_to_send() == b""


def test_connect_and_connack_5() -> None:
    own = Properties(session_expiry_interval=0xFFFFFFFF, user_properties=[("telemq-link", "1")])
    wire = Wire(MQTT_5, clean=False, properties=own)
    dialer = wire.dialer
    # The CONNECT states the dialer's limits next to the owner's properties.
    stated = Properties(
        session_expiry_interval=0xFFFFFFFF,
        user_properties=[("telemq-link", "1")],
        receive_maximum=20,
        topic_alias_maximum=5,
        maximum_packet_size=DIAL_MAX_PACKET,
    )
    sent = Connect("bridge-1", MQTT_5, False, 60, properties=stated)
    assert dialer.connect == sent
    assert own.receive_maximum is None  # the owner's CONNECT is left as it was
    assert wire.to_server() == [ConnectRequested(sent)]
    wire.server.accept(True, Flows(), 0.0, session_expiry_interval=3600)
    (event,) = wire.to_dialer()
    assert isinstance(event, ConnectAcknowledged)
    assert (event.return_code, event.session_present) == (0, True)
    assert event.properties is not None
    assert event.properties.session_expiry_interval == 3600
    assert event.properties.receive_maximum == 10
    assert event.reason_string is None
    flows = Flows()
    assert dialer.attach(flows, 0.0) == []
    # The server's limits bound what the dialer sends.
    peer = dialer.peer5
    assert peer is not None
    assert (peer.receive_maximum, peer.maximum_packet_size, peer.topic_alias_maximum) == (
        10,
        4096,
        4,
    )
    assert flows.max_inflight == 10
    assert (dialer.maximum_qos, dialer.retain_available) == (2, True)


def test_a_limit_the_connect_states_is_the_one_held_to() -> None:
    props = Properties(receive_maximum=3, maximum_packet_size=1000)
    wire, _, _ = connected(MQTT_5, properties=props)
    stated = wire.dialer.connect.properties
    assert stated is not None
    assert (stated.receive_maximum, stated.maximum_packet_size, stated.topic_alias_maximum) == (
        3,
        1000,
        5,
    )
    raw = encode(Publish("t", bytes(1000), 1, packet_id=1), MQTT_5)
    only_closed(
        wire.dialer.receive_data(raw, 1.0),
        ReasonCode.PACKET_TOO_LARGE,
        "packet too large: packet of 1009 bytes exceeds the maximum packet size of 1000 bytes",
    )


def test_connack_maximum_qos_and_retain_available_are_kept() -> None:
    limits = ServerLimits5(maximum_qos=1, retain_available=False)
    wire, _, _ = connected(MQTT_5, server_limits=limits)
    assert (wire.dialer.maximum_qos, wire.dialer.retain_available) == (1, False)


def test_session_present_after_a_clean_session_is_a_protocol_error() -> None:
    wire = Wire(MQTT_3_1_1, clean=True)
    wire.to_server()
    wire.server.accept(True, Flows(), 0.0)  # a server that breaks [MQTT-3.2.2-1]
    only_closed(
        wire.to_dialer(),
        ReasonCode.PROTOCOL_ERROR,
        "CONNACK with session present after a clean session",
    )


def test_connack_split_across_reads() -> None:
    wire = Wire()
    wire.dialer.data_to_send()
    raw = encode(ConnAck(0, False))
    for index in range(len(raw) - 1):
        assert wire.dialer.receive_data(raw[index : index + 1], 0.0) == []
    assert wire.dialer.receive_data(raw[-1:], 0.0) == [ConnectAcknowledged(0, False, None)]


def test_bytes_after_connack_wait_for_attach() -> None:
    wire = Wire()
    dialer = wire.dialer
    dialer.data_to_send()
    publish = Publish("a/b", b"x", qos=1, packet_id=3)
    assert dialer.receive_data(encode(ConnAck()) + encode(publish), 0.0) == [
        ConnectAcknowledged(0, False, None)
    ]
    assert dialer.has_buffered_input
    assert dialer.receive_data(PINGRESP, 0.0) == []  # still waiting: buffered too
    dialer.attach(Flows(), 0.0)
    assert dialer.receive_data(b"", 0.0) == [MessageReceived(publish)]
    assert not dialer.has_buffered_input
    assert not dialer.closed


def test_attach_answers_an_accepting_connack_only() -> None:
    wire = Wire()
    with pytest.raises(LocalProtocolError):
        wire.dialer.attach(Flows(), 0.0)


# ---------------------------------------------------------------------------
# Refusals


def test_refusal_3_1_1() -> None:
    wire = Wire()
    wire.to_server()
    wire.server.refuse(ConnectReturnCode.NOT_AUTHORIZED, "no links from here")
    assert wire.to_dialer() == [
        ConnectAcknowledged(5, False, None),
        ConnectionClosed("CONNACK 5 not authorized", False, ReasonCode.NOT_AUTHORIZED),
    ]
    assert wire.dialer.closed
    assert wire.dialer.data_to_send() == b""
    assert wire.dialer.next_timer() is None


def test_refusal_5_names_the_code_and_the_reason() -> None:
    wire = Wire(MQTT_5)
    wire.to_server()
    wire.server.refuse(ConnectReturnCode.NOT_AUTHORIZED, "announces broker 'edge-1'")
    events = wire.to_dialer()
    assert events == [
        ConnectAcknowledged(0x87, False, Properties(reason_string="announces broker 'edge-1'")),
        ConnectionClosed(
            "CONNACK 0x87 not authorized: announces broker 'edge-1'",
            False,
            ReasonCode.NOT_AUTHORIZED,
        ),
    ]
    event = events[0]
    assert isinstance(event, ConnectAcknowledged)
    assert event.reason_string == "announces broker 'edge-1'"
    assert wire.dialer.data_to_send() == b""  # a refused client just closes


def test_a_server_without_5_0_refuses_a_5_0_dialer_in_3_1_1_terms() -> None:
    """CONNACK 1 in 3.1.1's two bytes [MQTT-3.1.2-2]: a refusal (0x84), not a malformed
    5.0 CONNACK."""
    wire = Wire(MQTT_5)
    wire.dialer.data_to_send()
    assert wire.dialer.receive_data(b"\x20\x02\x00\x01", 0.0) == [
        ConnectAcknowledged(0x84, False, None),
        ConnectionClosed(
            "CONNACK 0x84 unsupported protocol version",
            False,
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
        ),
    ]


def test_refusal_with_an_unknown_return_code() -> None:
    wire = Wire()
    wire.dialer.data_to_send()
    assert wire.dialer.receive_data(b"\x20\x02\x00\x06", 0.0) == [
        ConnectAcknowledged(6, False, None),
        ConnectionClosed("CONNACK 6 (unknown return code)", False, ReasonCode.UNSPECIFIED_ERROR),
    ]


def test_a_server_takes_0x84_as_a_bridge_at_3_1_1() -> None:
    """telemq accepts a bridge's private level, as Mosquitto does (docs/network.md §8)."""
    wire = Wire(MQTT_3_1_1, bridge=True)
    (requested,) = wire.to_server()
    assert isinstance(requested, ConnectRequested)
    assert requested.packet.protocol_level == MQTT_3_1_1
    assert requested.packet.bridge
    assert wire.server.bridge and wire.server.protocol_level == MQTT_3_1_1
    wire.server.accept(False, Flows(), 0.0)
    (acknowledged,) = wire.to_dialer()
    assert acknowledged == ConnectAcknowledged(0, False, None)


def test_a_plain_connect_is_no_bridge() -> None:
    wire = Wire(MQTT_3_1)
    (requested,) = wire.to_server()
    assert isinstance(requested, ConnectRequested)
    assert not requested.packet.bridge and not wire.server.bridge


def test_levels_0x85_and_0x82_are_refused() -> None:
    """Only 0x83 and 0x84 are private levels: 0x80 | 5 is no MQTT level."""
    for level_byte in (0x85, 0x82):
        server = Connection(now=0.0, mqtt5=SERVER_LIMITS)
        events = server.receive_data(
            b"\x10\x0d\x00\x04MQTT" + bytes((level_byte,)) + b"\x02\x00\x0a\x00\x01b", 0.0
        )
        assert events == [
            ConnectionClosed(
                f"unsupported protocol level {level_byte}",
                False,
                ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            )
        ]


def _renamed(topic: bytes) -> bytes:
    return b"remote/" + topic[len(b"local/") :]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("outgoing_retain", [True, False])
def test_a_bridge_renames_what_it_sends(level: int, outgoing_retain: bool) -> None:
    """`rename` applies to QoS 0 (shared frames and 5.0), QoS 1 and 2 and their re-sends;
    `outgoing_retain=False` clears RETAIN."""
    wire, dialer_flows, _ = connected(level, rename=_renamed, outgoing_retain=outgoing_retain)
    dialer = wire.dialer
    if level == MQTT_5:
        dialer.send_publish(b"local/a", b"0", True, b"")
    else:
        dialer.send_frame_qos0(encode_publish(b"local/a", b"0", 0, True, False, 0))
    id_1 = dialer.deliver(b"local/b", b"1", 1, True, "one", 0.0)
    id_2 = dialer.deliver(b"local/c/d", b"2", 2, False, "two", 0.0)
    got = arrivals(wire.to_server())
    assert got == [
        ("remote/a", b"0", 0, outgoing_retain, False, 0),
        ("remote/b", b"1", 1, outgoing_retain, False, id_1),
        ("remote/c/d", b"2", 2, False, False, id_2),
    ]
    assert dialer_flows.outbound[id_1].topic == b"remote/b"
    resent = decode(_resend(dialer), level)
    assert [(p.topic, p.dup) for p in resent if isinstance(p, Publish)] == [
        ("remote/b", True),
        ("remote/c/d", True),
    ]


def _resend(dialer: DialConnection) -> bytes:
    dialer.resend_inflight(0.0)
    return dialer.data_to_send()


def test_split_frame_with_a_long_remaining_length() -> None:
    """A shared frame whose remaining length takes two bytes is renamed whole."""
    wire, _, _ = connected(MQTT_3_1_1, rename=_renamed)
    payload = bytes(range(256)) * 2
    wire.dialer.send_frame_qos0(encode_publish(b"local/x", payload, 0, False, False, 0))
    assert arrivals(wire.to_server()) == [("remote/x", payload, 0, False, False, 0)]


# ---------------------------------------------------------------------------
# Private bridge levels: golden bytes


def test_private_level_0x84_connect_bytes() -> None:
    connect = Connect(
        "bridge-1", MQTT_3_1_1, False, 60, username="u", password=b"p", protocol_name="MQTT"
    )
    dialer = DialConnection(connect, now=0.0, bridge=True)
    assert dialer.data_to_send() == (
        b"\x10\x1a"  # CONNECT, remaining length 26
        b"\x00\x04MQTT"  # protocol name
        b"\x84"  # protocol level 0x80 | 4
        b"\xc0"  # user name, password; no clean session
        b"\x00\x3c"  # keep-alive 60
        b"\x00\x08bridge-1"
        b"\x00\x01u"
        b"\x00\x01p"
    )
    assert dialer.protocol_level == MQTT_3_1_1  # it speaks 3.1.1
    assert dialer.bridge


def test_private_level_0x83_connect_bytes() -> None:
    connect = Connect("b", MQTT_3_1, True, 10, protocol_name="MQIsdp")
    dialer = DialConnection(connect, now=0.0, bridge=True)
    assert dialer.data_to_send() == b"\x10\x0f\x00\x06MQIsdp\x83\x02\x00\x0a\x00\x01b"


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="mqtt5"):
        DialConnection(Connect("b", MQTT_5), now=0.0)
    with pytest.raises(ValueError, match="private"):
        DialConnection(Connect("b", MQTT_5), now=0.0, bridge=True, mqtt5=DIAL_LIMITS)
    with pytest.raises(ValueError, match="protocol level"):
        DialConnection(Connect("b", 6), now=0.0)


# ---------------------------------------------------------------------------
# QoS 0, 1 and 2, both ways


@pytest.mark.parametrize("level", LEVELS)
def test_qos_0_both_ways(level: int) -> None:
    wire, _, _ = connected(level)
    if level == MQTT_5:
        assert wire.dialer.send_publish(b"up", b"0", False, b"")
        assert wire.server.send_publish(b"down", b"0", False, b"")
    else:
        wire.dialer.send_bytes(encode_publish(b"up", b"0", 0, False, False, 0))
        wire.server.send_bytes(encode_publish(b"down", b"0", 0, False, False, 0))
    assert arrivals(wire.to_server()) == [("up", b"0", 0, False, False, 0)]
    assert arrivals(wire.to_dialer()) == [("down", b"0", 0, False, False, 0)]


@pytest.mark.parametrize("level", LEVELS)
def test_qos_1_and_2_from_the_dialer(level: int) -> None:
    wire, dialer_flows, server_flows = connected(level)
    dialer, server = wire.dialer, wire.server
    id_1 = dialer.deliver(b"up/1", b"one", 1, False, "ref-1", 1.0)
    id_2 = dialer.deliver(b"up/2", b"two", 2, True, "ref-2", 1.0)
    assert (id_1, id_2) == (1, 2)
    assert arrivals(wire.to_server()) == [
        ("up/1", b"one", 1, False, False, id_1),
        ("up/2", b"two", 2, True, False, id_2),
    ]
    # The server's owner: PUBACK once stored; PUBREC once held.
    server.acknowledge(PacketType.PUBACK, id_1)
    server_flows.hold_incoming(id_2, "held two")
    server.acknowledge(PacketType.PUBREC, id_2)
    assert wire.to_dialer() == [
        DeliveryAcknowledged(id_1, "ref-1"),
        DeliveryReceived(id_2, "ref-2"),
    ]
    assert dialer_flows.outbound[id_2].state is InflightState.RELEASED
    dialer.acknowledge(PacketType.PUBREL, id_2)
    assert wire.to_server() == [MessageReleased(id_2, "held two")]
    server.acknowledge(PacketType.PUBCOMP, id_2)
    assert wire.to_dialer() == [DeliveryAcknowledged(id_2, "ref-2")]
    assert dialer_flows.outbound == {}
    assert server_flows.incoming == {}


@pytest.mark.parametrize("level", LEVELS)
def test_qos_1_and_2_to_the_dialer(level: int) -> None:
    wire, dialer_flows, server_flows = connected(level)
    dialer, server = wire.dialer, wire.server
    id_1 = server.deliver(b"down/1", b"one", 1, False, "ref-1", 1.0)
    id_2 = server.deliver(b"down/2", b"two", 2, False, "ref-2", 1.0)
    assert arrivals(wire.to_dialer()) == [
        ("down/1", b"one", 1, False, False, id_1),
        ("down/2", b"two", 2, False, False, id_2),
    ]
    dialer.acknowledge(PacketType.PUBACK, id_1)
    dialer_flows.hold_incoming(id_2, "held two")
    dialer.acknowledge(PacketType.PUBREC, id_2)
    assert wire.to_server() == [
        DeliveryAcknowledged(id_1, "ref-1"),
        DeliveryReceived(id_2, "ref-2"),
    ]
    server.acknowledge(PacketType.PUBREL, id_2)
    # A QoS 2 PUBLISH re-sent while held is flagged as the duplicate it is.
    server.send_bytes(encode(Publish("down/2", b"two", 2, False, True, id_2), level))
    events = wire.to_dialer()
    assert events[0] == MessageReleased(id_2, "held two")
    assert isinstance(events[1], MessageReceived) and not events[1].duplicate
    dialer.acknowledge(PacketType.PUBCOMP, id_2)
    assert wire.to_server() == [DeliveryAcknowledged(id_2, "ref-2")]
    assert server_flows.outbound == {}


def test_a_held_qos_2_resend_is_a_duplicate_on_the_dialer() -> None:
    wire, dialer_flows, _ = connected()
    packet_id = wire.server.deliver(b"t", b"x", 2, False, "ref", 1.0)
    wire.to_dialer()
    dialer_flows.hold_incoming(packet_id, "held")
    wire.server.send_bytes(encode(Publish("t", b"x", 2, False, True, packet_id)))
    (event,) = wire.to_dialer()
    assert isinstance(event, MessageReceived) and event.duplicate


# ---------------------------------------------------------------------------
# Resumption


@pytest.mark.parametrize("level", LEVELS)
def test_a_resumed_session_resends_both_ways(level: int) -> None:
    """In flight when the connection dropped: from the dialer a QoS 1 PUBLISH (unanswered)
    and a QoS 2 one released (PUBREL sent, no PUBCOMP); from the server a QoS 1 PUBLISH.
    The next connection re-sends them, the server right behind its CONNACK: those bytes
    wait for `attach`."""
    wire, dialer_flows, server_flows = connected(level, clean=False)
    dialer, server = wire.dialer, wire.server
    id_a = dialer.deliver(b"up/a", b"A", 1, False, "A", 1.0)
    id_b = dialer.deliver(b"up/b", b"B", 2, False, "B", 1.0)
    wire.to_server()
    server_flows.hold_incoming(id_b, "held B")
    server.acknowledge(PacketType.PUBREC, id_b)
    id_c = server.deliver(b"down/c", b"C", 1, False, "C", 1.0)
    wire.to_dialer()
    dialer.acknowledge(PacketType.PUBREL, id_b)
    dialer.data_to_send()  # lost with the connection
    assert dialer.connection_lost() == [
        ConnectionClosed("connection lost", False, ReasonCode.UNSPECIFIED_ERROR)
    ]
    server.connection_lost()

    again = Wire(level, clean=False, now=10.0)
    server_events, dialer_events = again.handshake(dialer_flows, server_flows, session_present=True)
    assert dialer_flows.connection_number == 2
    assert arrivals(server_events[:1]) == [("up/a", b"A", 1, False, True, id_a)]
    assert server_events[1:] == [MessageReleased(id_b, "held B")]
    assert arrivals(dialer_events) == [("down/c", b"C", 1, False, True, id_c)]
    again.server.acknowledge(PacketType.PUBACK, id_a)
    again.server.acknowledge(PacketType.PUBCOMP, id_b)
    assert again.to_dialer() == [DeliveryAcknowledged(id_a, "A"), DeliveryAcknowledged(id_b, "B")]
    again.dialer.acknowledge(PacketType.PUBACK, id_c)
    assert again.to_server() == [DeliveryAcknowledged(id_c, "C")]
    assert dialer_flows.outbound == {} and server_flows.outbound == {}


def test_resend_bytes_3_1_1() -> None:
    flows = Flows()
    flows.track(1, b"a", b"1", False, "one", 0.0)
    released = flows.track(2, b"b", b"2", False, "two", 0.0)
    flows.received(released.packet_id, 0.0)
    dialer = DialConnection(Connect("b", MQTT_3_1_1, False), now=0.0)
    dialer.data_to_send()
    dialer.receive_data(encode(ConnAck(0, True)), 1.0)
    assert dialer.attach(flows, 1.0) == []
    assert dialer.data_to_send() == (
        b"\x3a\x06\x00\x01a\x00\x011"  # PUBLISH QoS 1 DUP=1, id 1
        b"\x62\x02\x00\x02"  # PUBREL id 2
    )


def test_resend_respects_the_servers_receive_maximum() -> None:
    flows = Flows()
    for n in range(3):
        flows.track(1, b"t", bytes([n]), False, n, 0.0)
    wire = Wire(MQTT_5, clean=False, server_limits=ServerLimits5(receive_maximum=2))
    server_events, _ = wire.handshake(flows, Flows(), session_present=True)
    assert [arrival[5] for arrival in arrivals(server_events)] == [1, 2]
    wire.server.acknowledge(PacketType.PUBACK, 1)
    assert wire.to_dialer() == [DeliveryAcknowledged(1, 0)]
    (third,) = wire.to_server()
    assert isinstance(third, MessageReceived) and third.publish.packet_id == 3


# ---------------------------------------------------------------------------
# Keep-alive and timeouts


def test_pingreq_after_keepalive_seconds_of_silence() -> None:
    wire, _, _ = connected(keepalive=10)
    dialer = wire.dialer
    assert dialer.next_timer() == 10.0
    assert dialer.handle_timer(9.9) == []
    assert dialer.data_to_send() == b""
    assert dialer.handle_timer(10.0) == []
    assert dialer.data_to_send() == PINGREQ
    # The server answers; the PINGRESP is taken silently.
    wire.now = 10.5
    assert wire.server.receive_data(PINGREQ, 10.5) == []
    assert wire.to_dialer() == []
    assert dialer.last_received == 10.5
    assert dialer.next_timer() == 20.0  # 10 s after the PINGREQ
    assert not dialer.closed


def test_no_answer_within_one_and_a_half_keepalives_closes() -> None:
    wire, _, _ = connected(keepalive=10)
    dialer = wire.dialer
    dialer.handle_timer(10.0)
    assert dialer.data_to_send() == PINGREQ
    # A PINGREQ is outstanding: the next deadline is the close, 1.5 x 10 s after the CONNACK.
    assert dialer.next_timer() == 15.0
    assert dialer.handle_timer(14.9) == []
    only_closed(
        dialer.handle_timer(15.0),
        ReasonCode.KEEP_ALIVE_TIMEOUT,
        "no answer from the server within 1.5 x keep-alive (15 s)",
    )
    assert dialer.data_to_send() == b""  # nothing said to a server that does not answer
    assert dialer.next_timer() is None


def test_traffic_postpones_the_pingreq() -> None:
    wire, _, _ = connected(keepalive=10)
    dialer, server = wire.dialer, wire.server
    # The server sends at 4 s; the dialer's PUBACK goes out right after.
    wire.now = 4.0
    packet_id = server.deliver(b"t", b"x", 1, False, "ref", 4.0)
    wire.to_dialer()
    dialer.acknowledge(PacketType.PUBACK, packet_id)
    wire.to_server()
    # Seen at the dialer's next look at the clock (6 s): dated at the previous one (4 s).
    wire.now = 6.0
    server.send_bytes(encode_publish(b"t", b"y", 0, False, False, 0))
    wire.to_dialer()
    assert dialer.next_timer() == 14.0
    assert dialer.handle_timer(13.0) == []
    assert dialer.data_to_send() == b""
    dialer.handle_timer(14.0)
    assert dialer.data_to_send() == PINGREQ


def test_a_server_that_sends_nothing_is_asked_even_while_the_dialer_sends() -> None:
    wire, _, _ = connected(keepalive=10)
    dialer = wire.dialer
    for second in range(1, 10):
        dialer.send_bytes(encode_publish(b"t", b"x", 0, False, False, 0))
        dialer.data_to_send()
        assert dialer.handle_timer(float(second)) == []
    assert dialer.data_to_send() == b""
    dialer.handle_timer(10.0)  # nothing received for 10 s
    assert dialer.data_to_send() == PINGREQ


def test_server_keep_alive_replaces_the_keepalive() -> None:
    wire, _, _ = connected(MQTT_5, keepalive=60, server_limits=ServerLimits5(server_keep_alive=5))
    assert wire.dialer.keepalive == 5
    assert wire.dialer.next_timer() == 5.0


@pytest.mark.parametrize("level", LEVELS)
def test_keepalive_0_means_no_timer(level: int) -> None:
    wire, _, _ = connected(level, keepalive=0)
    assert wire.dialer.next_timer() is None
    assert wire.dialer.handle_timer(1000.0) == []
    assert wire.dialer.data_to_send() == b""


@pytest.mark.parametrize("level", LEVELS)
def test_connect_timeout(level: int) -> None:
    wire = Wire(level, connect_timeout=5.0)
    dialer = wire.dialer
    assert dialer.next_timer() == 5.0
    assert dialer.handle_timer(4.9) == []
    only_closed(
        dialer.handle_timer(5.0),
        ReasonCode.KEEP_ALIVE_TIMEOUT,
        "no CONNACK within the connect timeout (5 s)",
    )
    assert dialer.next_timer() is None
    dialer.data_to_send()  # the CONNECT
    assert dialer.data_to_send() == b""


def test_connack_stops_the_connect_timeout() -> None:
    wire, _, _ = connected(keepalive=0, connect_timeout=5.0)
    assert wire.dialer.next_timer() is None
    assert wire.dialer.handle_timer(6.0) == []


def test_mqtt_3_1_retries_unanswered_publishes() -> None:
    wire, _, _ = connected(MQTT_3_1, keepalive=0, retry_interval=20.0)
    dialer = wire.dialer
    packet_id = dialer.deliver(b"t", b"x", 1, False, "ref", 1.0)
    dialer.data_to_send()
    assert dialer.next_timer() == 21.0
    assert dialer.handle_timer(21.0) == []
    assert decode(dialer.data_to_send(), MQTT_3_1) == [
        Publish("t", b"x", 1, False, True, packet_id)
    ]


# ---------------------------------------------------------------------------
# SUBSCRIBE and UNSUBSCRIBE


def test_subscribe_and_unsubscribe_3_1_1() -> None:
    wire, _, _ = connected()
    dialer, server = wire.dialer, wire.server
    packet_id = dialer.subscribe([("a/#", 1), ("b", 2)])
    assert wire.to_server() == [SubscribeRequested(Subscribe(packet_id, [("a/#", 1), ("b", 2)]))]
    server.send(SubAck(packet_id, [1, 0x80]))
    assert wire.to_dialer() == [SubscribeAcknowledged(packet_id, [1, 0x80], None)]
    packet_id = dialer.unsubscribe(["a/#"])
    assert wire.to_server() == [UnsubscribeRequested(Unsubscribe(packet_id, ["a/#"]))]
    server.send(UnsubAck(packet_id))
    assert wire.to_dialer() == [UnsubscribeAcknowledged(packet_id, [], None)]
    assert not dialer.closed


def test_subscribe_and_unsubscribe_5_with_options() -> None:
    wire, _, _ = connected(MQTT_5)
    dialer, server = wire.dialer, wire.server
    options = subscription_options(1, no_local=True, retain_as_published=True, retain_handling=2)
    assert options == 0x2D
    props = Properties(user_properties=[("bridge", "b1")])
    packet_id = dialer.subscribe([("remote/#", options)], props)
    assert packet_id == 1
    raw = dialer.data_to_send()
    assert raw == (
        b"\x82\x1b\x00\x01"  # SUBSCRIBE, packet id 1
        b"\x0d\x26\x00\x06bridge\x00\x02b1"  # user property bridge=b1
        b"\x00\x08remote/#\x2d"  # filter, options 0x2D
    )
    assert server.receive_data(raw, 0.0) == [
        SubscribeRequested(Subscribe(packet_id, [("remote/#", 0x2D)], properties=props))
    ]
    server.send(SubAck(packet_id, [0x01], Properties(reason_string="granted")))
    assert wire.to_dialer() == [
        SubscribeAcknowledged(packet_id, [0x01], Properties(reason_string="granted"))
    ]
    packet_id = dialer.unsubscribe(["remote/#", "other"])
    assert wire.to_server() == [UnsubscribeRequested(Unsubscribe(packet_id, ["remote/#", "other"]))]
    server.send(UnsubAck(packet_id, [0x00, 0x11]))
    assert wire.to_dialer() == [UnsubscribeAcknowledged(packet_id, [0x00, 0x11], None)]


def test_subscribe_ids_do_not_collide_with_publishes_in_flight() -> None:
    wire, _, _ = connected()
    publish_id = wire.dialer.deliver(b"t", b"x", 1, False, "ref", 0.0)
    subscribe_id = wire.dialer.subscribe([("a", 0)])
    unsubscribe_id = wire.dialer.unsubscribe(["a"])
    assert len({publish_id, subscribe_id, unsubscribe_id}) == 3
    assert wire.dialer.deliver(b"t", b"x", 1, False, "ref", 0.0) not in (
        subscribe_id,
        unsubscribe_id,
    )


def test_subscribe_checks() -> None:
    wire = Wire()
    with pytest.raises(LocalProtocolError):
        wire.dialer.subscribe([("a", 0)])  # before attach
    wire, _, _ = connected()
    with pytest.raises(ValueError, match=r"MQTT 5\.0"):
        wire.dialer.subscribe([("a", 1 | 0x04)])  # No Local at 3.1.1
    with pytest.raises(ValueError, match="topic filter"):
        wire.dialer.subscribe([("a/#/b", 0)])
    with pytest.raises(ValueError):
        wire.dialer.subscribe([])
    with pytest.raises(ValueError, match=r"MQTT 5\.0"):
        wire.dialer.unsubscribe(["a"], Properties(user_properties=[("a", "b")]))
    with pytest.raises(ValueError):
        subscription_options(3)
    with pytest.raises(ValueError):
        subscription_options(0, retain_handling=3)
    assert wire.dialer.data_to_send() == b""
    wire5, _, _ = connected(MQTT_5)
    with pytest.raises(ValueError):
        wire5.dialer.subscribe([("a", 0x30)])  # retain handling 3


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (SubAck(7, [0]), "SUBACK for packet id 7, which no SUBSCRIBE awaits"),
        (UnsubAck(1, [0]), "UNSUBACK for packet id 1, which no UNSUBSCRIBE awaits"),
        (SubAck(1, [0, 0]), "SUBACK for packet id 1 has 2 codes for 1 topic filters"),
    ],
)
def test_an_ack_no_request_awaits_is_a_protocol_error(packet: Packet, reason: str) -> None:
    wire, _, _ = connected(MQTT_5)
    assert wire.dialer.subscribe([("a", 0)]) == 1
    wire.dialer.data_to_send()
    events = wire.dialer.receive_data(encode(packet, MQTT_5), 1.0)
    only_closed(events, ReasonCode.PROTOCOL_ERROR, reason)
    assert_disconnected(wire.dialer, 0x82, reason)


# ---------------------------------------------------------------------------
# The server's DISCONNECT and protocol errors


def test_server_disconnect_with_reason() -> None:
    wire, _, _ = connected(MQTT_5)
    wire.server.close("going down", ReasonCode.SERVER_SHUTTING_DOWN)
    assert wire.to_dialer() == [
        ConnectionClosed(
            "server sent DISCONNECT 0x8B server shutting down: going down",
            True,
            ReasonCode.SERVER_SHUTTING_DOWN,
        )
    ]
    assert wire.dialer.closed
    assert wire.dialer.data_to_send() == b""


def test_server_disconnect_with_a_server_reference() -> None:
    wire, _, _ = connected(MQTT_5)
    raw = encode(Disconnect(0x9C, Properties(server_reference="hub2:1883")), MQTT_5)
    assert wire.dialer.receive_data(raw, 1.0) == [
        ConnectionClosed(
            "server sent DISCONNECT 0x9C use another server (server reference 'hub2:1883')",
            True,
            ReasonCode.USE_ANOTHER_SERVER,
        )
    ]


def test_server_disconnect_before_connack() -> None:
    wire = Wire(MQTT_5)
    wire.dialer.data_to_send()
    assert wire.dialer.receive_data(encode(Disconnect(0x89), MQTT_5), 0.0) == [
        ConnectionClosed("server sent DISCONNECT 0x89 server busy", True, ReasonCode.SERVER_BUSY)
    ]


@pytest.mark.parametrize("level", LEVELS)
def test_publish_before_connack_is_a_protocol_error(level: int) -> None:
    wire = Wire(level)
    wire.dialer.data_to_send()
    raw = encode(Publish("a", b"x", 1, packet_id=1), level) + encode(ConnAck(), level)
    only_closed(
        wire.dialer.receive_data(raw, 0.0), ReasonCode.PROTOCOL_ERROR, "PUBLISH before CONNACK"
    )
    if level == MQTT_5:
        assert_disconnected(wire.dialer, 0x82, "PUBLISH before CONNACK")
    else:
        assert wire.dialer.data_to_send() == b""


@pytest.mark.parametrize(
    "packet",
    [
        PingReq(),
        Subscribe(1, [("a", 0)]),
        Unsubscribe(1, ["a"]),
        Connect("x", MQTT_3_1_1),
        ConnAck(),
        Disconnect(),
    ],
    ids=lambda packet: type(packet).__name__,
)
def test_packets_a_server_never_sends_3_1_1(packet: Packet) -> None:
    wire, _, _ = connected()
    events = wire.dialer.receive_data(encode(packet), 1.0)
    assert len(events) == 1
    closed = events[0]
    assert isinstance(closed, ConnectionClosed)
    assert closed.code is ReasonCode.PROTOCOL_ERROR
    assert wire.dialer.closed
    assert wire.dialer.data_to_send() == b""


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (PingReq(), "a server may not send PINGREQ"),
        (Subscribe(1, [("a", 0)]), "a server may not send SUBSCRIBE"),
        (Connect("x", MQTT_5), "a server may not send CONNECT"),
        (Auth(0x18, Properties(authentication_method="X")), "a server may not send AUTH"),
        (ConnAck(), "a second CONNACK"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_packets_a_server_never_sends_5(packet: Packet, reason: str) -> None:
    wire, _, _ = connected(MQTT_5)
    events = wire.dialer.receive_data(encode(packet, MQTT_5), 1.0)
    only_closed(events, ReasonCode.PROTOCOL_ERROR, reason)
    assert_disconnected(wire.dialer, 0x82, reason)


def test_malformed_connack_closes() -> None:
    wire = Wire()
    wire.dialer.data_to_send()
    only_closed(
        wire.dialer.receive_data(b"\x20\x03\x00\x00\x00", 0.0),
        ReasonCode.MALFORMED_PACKET,
        "malformed packet: CONNACK: remaining length must be 2, got 3",
    )


def test_a_first_packet_too_large_closes_from_its_header() -> None:
    wire = Wire(max_packet_size=100)
    wire.dialer.data_to_send()
    only_closed(
        wire.dialer.receive_data(b"\x30\xff\x01", 0.0),  # remaining length 255
        ReasonCode.PACKET_TOO_LARGE,
        "packet too large: packet of 258 bytes exceeds the maximum packet size of 100 bytes",
    )


def test_malformed_packet_after_attach_gets_disconnect_0x81_at_5() -> None:
    wire, _, _ = connected(MQTT_5)
    events = wire.dialer.receive_data(b"\x00\x00", 1.0)  # reserved packet type 0
    assert len(events) == 1
    closed = events[0]
    assert isinstance(closed, ConnectionClosed) and closed.code is ReasonCode.MALFORMED_PACKET
    assert_disconnected(wire.dialer, 0x81, closed.reason)


def test_close_before_attach_tells_a_5_server_why() -> None:
    """E.g. a link whose CONNACK names another broker; a code only servers send goes out
    as 0x80, the owner's code stays in the event."""
    wire = Wire(MQTT_5)
    wire.to_server()
    wire.server.accept(False, Flows(), 0.0)
    wire.to_dialer()
    closed = wire.dialer.close("expected broker 'hub'", ReasonCode.NOT_AUTHORIZED)
    assert closed == ConnectionClosed("expected broker 'hub'", False, ReasonCode.NOT_AUTHORIZED)
    assert_disconnected(wire.dialer, 0x80, "expected broker 'hub'")


def test_close_after_attach_at_5() -> None:
    wire, _, _ = connected(MQTT_5)
    closed = wire.dialer.close("shutting down")
    assert closed == ConnectionClosed("shutting down", False, ReasonCode.ADMINISTRATIVE_ACTION)
    assert wire.to_server() == [
        DisconnectRequested(0x98, None),
        ConnectionClosed(
            "client sent DISCONNECT (reason 0x98)", True, ReasonCode.ADMINISTRATIVE_ACTION
        ),
    ]


# ---------------------------------------------------------------------------
# MQTT 5.0 limits, both ways


def test_topic_aliases_both_ways() -> None:
    """The server may use the dialer's Topic Alias Maximum (5), the dialer the server's (4);
    each side resolves the other's."""
    wire, _, _ = connected(MQTT_5)
    for _ in range(2):
        wire.server.send_publish(b"down/t", b"x", False, b"")
        wire.dialer.send_publish(b"up/t", b"y", False, b"")
    raw = wire.server.data_to_send()
    sent = decode(raw, MQTT_5)
    assert [packet.topic for packet in sent if isinstance(packet, Publish)] == ["down/t", ""]
    assert [arrival[0] for arrival in arrivals(wire.dialer.receive_data(raw, 1.0))] == [
        "down/t",
        "down/t",
    ]
    assert [arrival[0] for arrival in arrivals(wire.to_server())] == ["up/t", "up/t"]


def test_a_topic_alias_above_the_dialers_maximum_gets_disconnect_0x94() -> None:
    wire, _, _ = connected(MQTT_5)
    raw = encode(Publish("t", b"x", properties=Properties(topic_alias=6)), MQTT_5)
    reason = "topic alias 6 is above the maximum of 5"
    only_closed(wire.dialer.receive_data(raw, 1.0), ReasonCode.TOPIC_ALIAS_INVALID, reason)
    assert_disconnected(wire.dialer, 0x94, reason)


def test_the_dialers_receive_maximum_is_held_to() -> None:
    wire, _, _ = connected(MQTT_5, properties=Properties(receive_maximum=2))
    raw = b"".join(
        encode(Publish("t", b"x", 1, packet_id=packet_id), MQTT_5) for packet_id in (1, 2, 3)
    )
    events = wire.dialer.receive_data(raw, 1.0)
    assert len(events) == 3
    assert events[2] == ConnectionClosed(
        "more than 2 QoS 1/2 PUBLISHes unanswered", False, ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    )


def test_a_message_above_the_servers_maximum_packet_size_is_not_sent() -> None:
    wire, flows, _ = connected(MQTT_5, server_limits=ServerLimits5(maximum_packet_size=100))
    assert wire.dialer.deliver(b"t", bytes(200), 1, False, "big", 1.0) == 0
    assert flows.outbound == {}
    assert wire.dialer.data_to_send() == b""
