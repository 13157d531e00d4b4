"""Hypothesis over the connection state machine: a stateful model of a session (client
packets, deliveries, timers, disconnections, reconnections) and stream-split invariance."""

from __future__ import annotations

from dataclasses import dataclass

from connection_helpers import connect_packet, sent_packets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from packet_cases import LEVELS, MALFORMED_CASES, MQTT_3_1, MQTT_3_1_1
from packet_strategies import client_packets, packet_ids, topic_names

from telemq.protocol import (
    ConnAck,
    Connection,
    ConnectionClosed,
    ConnectRequested,
    DeliveryAcknowledged,
    DeliveryReceived,
    Disconnect,
    DisconnectRequested,
    Event,
    Flows,
    InflightState,
    MessageReceived,
    MessageReleased,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    Subscribe,
    SubscribeRequested,
    Unsubscribe,
    UnsubscribeRequested,
    encode,
)

RETRY_INTERVAL = 15.0


@dataclass
class Outbound:
    """The model of one outbound QoS 1/2 delivery."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    ref: str
    sent_at: float
    released: bool = False

    def resend(self, packet_id: int) -> Packet:
        if self.released:
            return PubRel(packet_id)
        return Publish(self.topic, self.payload, self.qos, self.retain, True, packet_id)


class ConnectionMachine(RuleBasedStateMachine):
    """One persistent session seen by the server, across several connections.

    The model predicts every event and every packet written; the owner's part (holding
    QoS 2 messages, answering CONNECT) is played by the rules.
    """

    def __init__(self) -> None:
        super().__init__()
        self.flows = Flows()
        self.level = MQTT_3_1_1
        self.keepalive = 0
        self.now = 0.0
        self.last_received = 0.0
        self.connection = Connection(now=0.0)
        self.outbound: dict[int, Outbound] = {}
        self.held: dict[int, str] = {}
        self.deliveries = 0

    # -- connecting ---------------------------------------------------------

    @initialize(level=st.sampled_from(LEVELS), keepalive=st.sampled_from([0, 4, 10, 30]))
    def connect(self, level: int, keepalive: int) -> None:
        self.level = level
        self.keepalive = keepalive
        self.open_connection(session_present=False)

    @precondition(lambda self: self.connection.closed)
    @rule()
    def reconnect(self) -> None:
        self.open_connection(session_present=True)

    def open_connection(self, session_present: bool) -> None:
        self.connection = Connection(now=self.now, retry_interval=RETRY_INTERVAL)
        packet = connect_packet(
            self.level, "machine", clean_session=not session_present, keepalive=self.keepalive
        )
        assert self.connection.receive_data(encode(packet), self.now) == [ConnectRequested(packet)]
        self.last_received = self.now
        # Session present only exists in 3.1.1 (CONNACK byte 1 is reserved in 3.1).
        self.connection.accept(session_present and self.level == MQTT_3_1_1, self.flows, self.now)
        sent = sent_packets(self.connection)
        assert isinstance(sent[0], ConnAck)
        assert sent[0].return_code == 0
        # Everything in flight is re-sent, in the order it was first sent.
        assert sent[1:] == [entry.resend(packet_id) for packet_id, entry in self.outbound.items()]
        for entry in self.outbound.values():
            entry.sent_at = self.now

    # -- the client's packets -------------------------------------------------

    @precondition(lambda self: not self.connection.closed)
    @rule(data=st.data())
    def client_sends(self, data: st.DataObject) -> None:
        self.receive(data.draw(client_packets(self.level), label="packet"))

    @precondition(lambda self: not self.connection.closed)
    @rule(data=st.data(), kind=st.sampled_from([PubAck, PubRec, PubComp]))
    def client_acknowledges_a_delivery(
        self, data: st.DataObject, kind: type[PubAck | PubRec | PubComp]
    ) -> None:
        ids = st.sampled_from(list(self.outbound)) if self.outbound else packet_ids
        self.receive(kind(data.draw(ids, label="packet id")))

    @precondition(lambda self: not self.connection.closed)
    @rule(data=st.data(), dup=st.booleans())
    def client_releases(self, data: st.DataObject, dup: bool) -> None:
        ids = st.sampled_from(sorted(self.held)) if self.held else packet_ids
        self.receive(PubRel(data.draw(ids, label="packet id"), dup=dup and self.level == MQTT_3_1))

    @precondition(lambda self: not self.connection.closed)
    @rule(data=st.data(), dup=st.booleans())
    def client_resends_a_held_publication(self, data: st.DataObject, dup: bool) -> None:
        ids = st.sampled_from(sorted(self.held)) if self.held else packet_ids
        self.receive(Publish("a/b", b"again", 2, False, dup, data.draw(ids, label="packet id")))

    @precondition(lambda self: not self.connection.closed)
    @rule(
        data=st.data(),
        how=st.sampled_from(["DISCONNECT", "malformed packet", "server close", "transport lost"]),
    )
    def connection_ends(self, data: st.DataObject, how: str) -> None:
        if how == "DISCONNECT":
            self.receive(Disconnect())
        elif how == "malformed packet":
            case = data.draw(
                st.sampled_from([case for case in MALFORMED_CASES if case.level == self.level]),
                label="malformed",
            )
            events = self.connection.receive_data(case.raw, self.now)
            assert len(events) == 1
            assert isinstance(events[0], ConnectionClosed)
            assert case.message in events[0].reason
            assert not events[0].graceful
            assert events[0].code == case.reason  # 0x81, or 0x82 for packet id 0
        elif how == "server close":
            closed = self.connection.close("session taken over", ReasonCode.SESSION_TAKEN_OVER)
            assert closed == ConnectionClosed(
                "session taken over", False, ReasonCode.SESSION_TAKEN_OVER
            )
        else:
            assert self.connection.connection_lost() == [ConnectionClosed("connection lost")]
        assert self.connection.closed
        assert self.connection.data_to_send() == b""

    @precondition(lambda self: self.connection.closed)
    @rule(
        data=st.data(),
        garbage=st.binary(max_size=12),
        seconds=st.integers(min_value=0, max_value=100),
    )
    def input_after_the_end_is_ignored(
        self, data: st.DataObject, garbage: bytes, seconds: int
    ) -> None:
        packet = data.draw(client_packets(self.level), label="packet")
        connection = self.connection
        assert connection.receive_data(encode(packet), self.now) == []
        assert connection.receive_data(garbage, self.now) == []
        assert connection.receive_data(encode(connect_packet(self.level)), self.now) == []
        assert connection.handle_timer(self.now + seconds) == []
        assert connection.connection_lost() == []
        connection.send(PingResp())
        assert connection.data_to_send() == b""

    def receive(self, packet: Packet) -> None:
        events = self.connection.receive_data(encode(packet), self.now)
        self.last_received = self.now
        expected_events, expected_sent = self.expect(packet)
        assert events == expected_events
        assert sent_packets(self.connection) == expected_sent
        # The owner stores each new QoS 2 publication until its PUBREL, and answers PUBREC
        # with PUBREL once it has recorded the released state.
        for event in events:
            if isinstance(event, DeliveryReceived):
                self.connection.send(PubRel(event.packet_id))
                assert sent_packets(self.connection) == [PubRel(event.packet_id)]
            if (
                isinstance(event, MessageReceived)
                and event.publish.qos == 2
                and not event.duplicate
            ):
                message = f"message {event.publish.packet_id}"
                self.flows.hold_incoming(event.publish.packet_id, message)
                self.held[event.publish.packet_id] = message

    def expect(self, packet: Packet) -> tuple[list[Event], list[Packet]]:
        """The events and the packets written for one client packet, from the model."""
        if isinstance(packet, Publish):
            duplicate = packet.qos == 2 and packet.packet_id in self.held
            return [MessageReceived(packet, duplicate)], []
        if isinstance(packet, PubAck | PubRec | PubComp):
            return self.expect_acknowledgement(packet)
        if isinstance(packet, PubRel):
            return [MessageReleased(packet.packet_id, self.held.pop(packet.packet_id, None))], []
        if isinstance(packet, Subscribe):
            return [SubscribeRequested(packet)], []
        if isinstance(packet, Unsubscribe):
            return [UnsubscribeRequested(packet)], []
        if isinstance(packet, PingReq):
            return [], [PingResp()]
        assert isinstance(packet, Disconnect)
        closed = ConnectionClosed("client sent DISCONNECT", True, ReasonCode.NORMAL_DISCONNECTION)
        return [DisconnectRequested(), closed], []

    def expect_acknowledgement(
        self, packet: PubAck | PubRec | PubComp
    ) -> tuple[list[Event], list[Packet]]:
        """An unknown id is harmless (PUBREC still gets PUBREL); a known one answered with
        the wrong kind of acknowledgement closes the connection."""
        packet_id = packet.packet_id
        entry = self.outbound.get(packet_id)
        if entry is None:
            return [], [PubRel(packet_id)] if isinstance(packet, PubRec) else []
        if isinstance(packet, PubAck) and entry.qos == 1:
            del self.outbound[packet_id]
            return [DeliveryAcknowledged(packet_id, entry.ref)], []
        if isinstance(packet, PubRec) and entry.qos == 2:
            entry.released = True
            entry.sent_at = self.now
            return [DeliveryReceived(packet_id, entry.ref)], []
        if isinstance(packet, PubComp) and entry.qos == 2 and entry.released:
            del self.outbound[packet_id]
            return [DeliveryAcknowledged(packet_id, entry.ref)], []
        name = type(packet).__name__.upper()
        step = "awaiting PUBCOMP" if entry.released else "published"
        reason = f"{name} for packet id {packet_id}, a QoS {entry.qos} message {step}"
        return [ConnectionClosed(reason, False, ReasonCode.PROTOCOL_ERROR)], []

    # -- the broker's side ----------------------------------------------------

    @precondition(lambda self: self.flows.has_window())
    @rule(
        qos=st.integers(min_value=1, max_value=2),
        topic=topic_names(),
        payload=st.binary(max_size=8),
        retain=st.booleans(),
    )
    def broker_delivers(self, qos: int, topic: str, payload: bytes, retain: bool) -> None:
        self.deliveries += 1
        ref = f"delivery {self.deliveries}"
        packet_id = self.connection.deliver(
            topic.encode("utf-8"), payload, qos, retain, ref, self.now
        )
        assert 1 <= packet_id <= 65535
        assert packet_id not in self.outbound
        self.outbound[packet_id] = Outbound(topic, payload, qos, retain, ref, self.now)
        if self.connection.closed:
            assert self.connection.data_to_send() == b""
        else:
            assert sent_packets(self.connection) == [
                Publish(topic, payload, qos, retain, False, packet_id)
            ]

    @rule(seconds=st.sampled_from([0, 1, 5, 6, 14, 15, 16, 45]))
    def time_passes(self, seconds: int) -> None:
        self.now += seconds
        was_closed = self.connection.closed
        assert self.connection.next_timer() == self.expected_deadline()
        events = self.connection.handle_timer(self.now)
        if was_closed:
            assert events == []
            assert self.connection.data_to_send() == b""
            return
        window = 1.5 * self.keepalive
        if window and self.now >= self.last_received + window:
            assert len(events) == 1
            assert isinstance(events[0], ConnectionClosed)
            assert "keep-alive expired" in events[0].reason
            assert not events[0].graceful
            assert events[0].code is ReasonCode.KEEP_ALIVE_TIMEOUT
            assert self.connection.data_to_send() == b""
            return
        assert events == []
        resent: list[Packet] = []
        if self.level == MQTT_3_1:
            for packet_id, entry in self.outbound.items():
                if self.now >= entry.sent_at + RETRY_INTERVAL:
                    resent.append(entry.resend(packet_id))
                    entry.sent_at = self.now
        assert sent_packets(self.connection) == resent

    def expected_deadline(self) -> float | None:
        if self.connection.closed:
            return None
        deadlines = []
        if self.keepalive:
            deadlines.append(self.last_received + 1.5 * self.keepalive)
        if self.level == MQTT_3_1 and self.outbound:
            deadlines.append(
                min(entry.sent_at for entry in self.outbound.values()) + RETRY_INTERVAL
            )
        return min(deadlines, default=None)

    # -- invariants -----------------------------------------------------------

    @invariant()
    def flows_follow_the_model(self) -> None:
        assert list(self.flows.outbound) == list(self.outbound)
        for packet_id, entry in self.outbound.items():
            inflight = self.flows.outbound[packet_id]
            assert inflight.qos == entry.qos
            assert inflight.ref == entry.ref
            expected_state = InflightState.RELEASED if entry.released else InflightState.PUBLISHED
            assert inflight.state is expected_state
        assert self.flows.incoming == self.held

    @invariant()
    def a_closed_connection_has_no_timer(self) -> None:
        if self.connection.closed:
            assert self.connection.next_timer() is None


ConnectionMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestConnectionMachine = ConnectionMachine.TestCase


# ---------------------------------------------------------------------------
# The same stream, split differently, gives the same events and the same output


def run(chunks: list[bytes]) -> tuple[list[Event], bytes]:
    """Feed chunks as an owner would: accept the CONNECT, then read what followed it."""
    connection = Connection(now=0.0)
    events: list[Event] = []
    for chunk in chunks:
        new = connection.receive_data(chunk, 1.0)
        events += new
        if any(isinstance(event, ConnectRequested) for event in new):
            connection.accept(False, Flows(), 1.0)
            events += connection.receive_data(b"", 1.0)
    return events, connection.data_to_send()


@settings(max_examples=100, deadline=None)
@given(level=st.sampled_from(LEVELS), data=st.data())
def test_valid_client_streams_never_raise_and_ignore_how_they_are_split(
    level: int, data: st.DataObject
) -> None:
    packets = data.draw(st.lists(client_packets(level), max_size=8), label="packets")
    if data.draw(st.booleans(), label="disconnect"):
        packets.append(Disconnect())
    stream = encode(connect_packet(level)) + b"".join(encode(packet) for packet in packets)
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)), label="cut")

    events, output = run([stream])
    assert run([stream[:cut], stream[cut:]]) == (events, output)
    assert events[0] == ConnectRequested(connect_packet(level))
    closed = [event for event in events if isinstance(event, ConnectionClosed)]
    if Disconnect() in packets:
        assert closed == [
            ConnectionClosed("client sent DISCONNECT", True, ReasonCode.NORMAL_DISCONNECTION)
        ]
        assert events[-1] == closed[0]
    else:
        assert closed == []
        assert len(events) == 1 + len(
            [
                packet
                for packet in packets
                if not isinstance(packet, PubAck | PubRec | PubComp | PingReq)
            ]
        )


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_streams_ending_in_a_malformed_packet_ignore_how_they_are_split(
    data: st.DataObject,
) -> None:
    packets = data.draw(st.lists(client_packets(MQTT_3_1_1), max_size=4), label="packets")
    case = data.draw(
        st.sampled_from([case for case in MALFORMED_CASES if case.level == MQTT_3_1_1]),
        label="malformed",
    )
    stream = (
        encode(connect_packet(MQTT_3_1_1))
        + b"".join(encode(packet) for packet in packets)
        + case.raw
    )
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)), label="cut")
    events, output = run([stream])
    assert isinstance(events[-1], ConnectionClosed)
    assert case.message in events[-1].reason
    assert run([stream[:cut], stream[cut:]]) == (events, output)
