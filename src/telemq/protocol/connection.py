"""The server side of one MQTT connection, without I/O: the message flow.

Theory of operation
-------------------
Bytes go in through `receive_data(data, now)`, which returns events; bytes to
write come out of `data_to_send()`. Time is an argument, never read: the owner
asks `next_timer()` when it wants to be called back and then calls
`handle_timer(now)`. The owner (the broker) answers events by calling methods
(`accept`, `refuse`, `send`, `deliver`, `close`).

This module is what runs per packet once a client is connected; the handshake,
enhanced authentication, resumption, deadlines and the end of a connection are
its base class, `ConnectionLifecycle` (lifecycle.py), which owns the attributes.
Bytes that arrive after CONNECT are buffered, not decoded, until the owner
answers it with `accept` or `refuse`, so nothing is answered before the
CONNACK; after `accept` the owner calls `receive_data(b"", now)` to process
them. Rules enforced here:

* the first packet must be CONNECT, and only one CONNECT is allowed;
* packets a client never sends (CONNACK, SUBACK, ...) close the connection;
* PINGREQ is answered here;
* outbound QoS 1/2 bookkeeping through the session's `Flows`: an acknowledgement
  of another QoS or step for an id in flight is a protocol error; on PUBREC the
  owner sends PUBREL (`DeliveryReceived`), once it has recorded the released state.

Any protocol violation ends in `ConnectionClosed` with the reason. Acknowledgements
of *incoming* QoS 1/2 publications are left to the owner, which sends them once
the message is durable.

MQTT 5.0 (when the owner gives `mqtt5`, the server's `ServerLimits5`): the client's
limits, its aliases and the 5.0 packets the server writes are a `Peer5` (peer5.py).
An error after CONNACK is a DISCONNECT with its reason code before the close;
incoming PUBLISHes are held to the limits, outgoing ones to the client's Receive
Maximum and Maximum Packet Size (`deliver` returns 0 for a message too large).
"""

from __future__ import annotations

from .codec import PINGRESP_BYTES, encode, encode_ack, encode_publish
from .errors import LocalProtocolError
from .events import (
    ConnectionClosed,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    Event,
    MessageReceived,
    MessageReleased,
    SubscribeRequested,
    UnsubscribeRequested,
)
from .flows import Inflight, InflightState
from .lifecycle import (
    NO_OUTPUT,
    ConnectionLifecycle,
    ConnectionState,
    publish_frame,
    reason_of,
)
from .packets import (
    Auth,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Unsubscribe,
)
from .reasons import ReasonCode

__all__ = ["Connection", "ConnectionState"]

_PUBACK = PacketType.PUBACK
_PUBREC = PacketType.PUBREC


class Connection(ConnectionLifecycle):
    """Server-side MQTT 3.1/3.1.1/5.0 connection state machine (see module docstring)."""

    __slots__ = ()

    # -- input ----------------------------------------------------------

    def receive_data(self, data: bytes, now: float, max_packets: int = 0) -> list[Event]:
        """Feed bytes read from the peer; returns the events they complete.

        With `max_packets` (0: no limit) at most that many packets are decoded; the rest
        stays buffered (`input_held`) until the owner calls `receive_data(b"", now)` again,
        so that it can let other connections' work run in between.
        """
        state = self.state
        if state is ConnectionState.CLOSED:
            self.input_held = False
            return []
        self.bytes_received += len(data)
        if state is ConnectionState.CONNECTING:
            self.append(data)
            self.input_held = False
            return []
        packets, error = self.feed_partial(
            data, state is not ConnectionState.CONNECTED, max_packets
        )
        self.input_held = max_packets > 0 and len(packets) == max_packets and self.buffered > 0
        if packets:
            # Keep-alive counts control packets [MQTT-3.1.2-24], not bytes: a client that
            # trickles a packet one byte at a time is not alive.
            self.last_received = now
        events: list[Event] = []
        for packet in packets:
            self._handle(packet, now, events)
            if self.closed:
                return events
        if error is not None and self.state is not ConnectionState.CONNECTING:
            code = reason_of(error.reason)  # "malformed packet: ...", "packet too large: ..."
            events.append(self._fail(f"{code.name.lower().replace('_', ' ')}: {error}", code))
        return events

    @property
    def has_buffered_input(self) -> bool:
        """Bytes wait in the decoder (e.g. those that followed CONNECT)."""
        return self.buffered > 0

    def _handle(self, packet: Packet, now: float, events: list[Event]) -> None:
        kind = type(packet)
        if kind is Publish:
            assert isinstance(packet, Publish)
            if self.state is not ConnectionState.CONNECTED:
                events.append(self._fail(self._out_of_turn(), ReasonCode.PROTOCOL_ERROR))
                return
            if self.peer5 is not None and not self._check_publish5(packet, events):
                return
            duplicate = False
            flows = self.flows
            if packet.qos == 2 and flows is not None:
                duplicate = flows.is_held(packet.packet_id) or (
                    bool(flows.released)
                    and flows.is_released_resend(
                        packet.packet_id, packet.topic, packet.payload, packet.retain
                    )
                )
            events.append(MessageReceived(packet, duplicate))
            return
        if self.state is ConnectionState.AWAIT_CONNECT:
            if kind is Connect:
                assert isinstance(packet, Connect)
                self._handle_connect(packet, events)
            else:
                events.append(
                    self._fail("the first packet is not CONNECT", ReasonCode.PROTOCOL_ERROR)
                )
            return
        if self.state is ConnectionState.AUTHENTICATING and kind is not Disconnect:
            if kind is Auth:
                assert isinstance(packet, Auth)
                self._auth_received(packet, events)
            else:
                events.append(self._fail(self._out_of_turn(), ReasonCode.PROTOCOL_ERROR))
            return
        flows = self.flows
        peer = self.peer5
        if peer is not None and (kind is Subscribe or kind is Disconnect):
            assert isinstance(packet, Subscribe | Disconnect) and self._settings.limits5 is not None
            refusal, problem = peer.check_request(packet, self._settings.limits5)
            if refusal:
                events.append(self._fail(problem, refusal))
                return
        if kind is PubAck:
            assert isinstance(packet, PubAck)
            inflight = flows.acknowledge(packet.packet_id) if flows else None
            if inflight is not None:
                self._completed(inflight, now, events)
            else:
                self._check_ack_kind("PUBACK", packet.packet_id, events)
        elif kind is PubRec:
            assert isinstance(packet, PubRec)
            inflight = flows.received(packet.packet_id, now) if flows else None
            if inflight is not None and packet.reason_code >= 0x80 and flows is not None:
                # MQTT 5.0: a PUBREC with an error ends the exchange; no PUBREL follows.
                flows.complete(packet.packet_id)
                self._completed(inflight, now, events)
            elif inflight is not None:
                # The owner sends PUBREL once the released state is durable: after a
                # crash it must resume with PUBREL, never re-send the PUBLISH.
                events.append(DeliveryReceived(packet.packet_id, inflight.ref))
            elif not self._check_ack_kind("PUBREC", packet.packet_id, events):
                # Unknown id: PUBREL anyway, so a peer stuck in the flow completes it.
                self._emit(encode_ack(PacketType.PUBREL, packet.packet_id))
        elif kind is PubComp:
            assert isinstance(packet, PubComp)
            inflight = flows.complete(packet.packet_id) if flows else None
            if inflight is not None:
                self._completed(inflight, now, events)
            else:
                self._check_ack_kind("PUBCOMP", packet.packet_id, events)
        elif kind is PubRel:
            assert isinstance(packet, PubRel)
            message = flows.release_incoming(packet.packet_id) if flows else None
            events.append(MessageReleased(packet.packet_id, message))
        elif kind is PingReq:
            self._emit(PINGRESP_BYTES)
        elif kind is Subscribe:
            assert isinstance(packet, Subscribe)
            events.append(SubscribeRequested(packet))
        elif kind is Unsubscribe:
            assert isinstance(packet, Unsubscribe)
            events.append(UnsubscribeRequested(packet))
        elif kind is Disconnect:
            assert isinstance(packet, Disconnect)
            code = packet.reason_code
            expiry = packet.properties.session_expiry_interval if packet.properties else None
            events.append(DisconnectRequested(code, expiry))
            self._close("client sent DISCONNECT" + (f" (reason 0x{code:02X})" if code else ""))
            events.append(ConnectionClosed(self._closed_reason, True, reason_of(code)))
        elif kind is Auth and peer is not None:
            assert isinstance(packet, Auth)
            self._auth_received(packet, events)
        elif kind is Connect:
            events.append(
                self._fail("a second CONNECT on the same connection", ReasonCode.PROTOCOL_ERROR)
            )
        else:
            events.append(
                self._fail(
                    f"a client may not send {packet.packet_type.name}", ReasonCode.PROTOCOL_ERROR
                )
            )

    def _check_publish5(self, packet: Publish, events: list[Event]) -> bool:
        """An MQTT 5.0 PUBLISH against this connection's limits (`Peer5.check_publish`);
        False when it goes no further: the connection failed, or the PUBLISH is refused in
        its PUBACK/PUBREC (a payload that is not the UTF-8 it says it is)."""
        peer = self.peer5
        limits = self._settings.limits5
        assert peer is not None and limits is not None
        code, problem = peer.check_publish(packet, limits)
        if not code:
            return True
        if code == ReasonCode.PAYLOAD_FORMAT_INVALID and packet.qos:
            self.acknowledge(_PUBACK if packet.qos == 1 else _PUBREC, packet.packet_id, code)
        else:
            events.append(self._fail(problem, code))
        return False

    def _completed(self, inflight: Inflight, now: float, events: list[Event]) -> None:
        """An outbound exchange is over: the owner hears of it, and a PUBLISH waiting for
        room in the client's Receive Maximum goes (`resend_inflight`)."""
        events.append(DeliveryAcknowledged(inflight.packet_id, inflight.ref))
        peer = self.peer5
        if peer is not None and peer.waiting:
            self._send_waiting(now)

    def _check_ack_kind(self, name: str, packet_id: int, events: list[Event]) -> bool:
        """An acknowledgement that did not fit its id: True (and the connection failed) when
        the id is in flight, as another QoS or in another step (PUBACK for QoS 2, PUBREC or
        PUBCOMP for QoS 1, PUBCOMP before PUBREC): a protocol error, as for Mosquitto. An
        unknown id stays harmless: a re-sent acknowledgement of a finished flow."""
        inflight = self.flows.outbound.get(packet_id) if self.flows is not None else None
        if inflight is None:
            return False
        step = "awaiting PUBCOMP" if inflight.state is InflightState.RELEASED else "published"
        events.append(
            self._fail(
                f"{name} for packet id {packet_id}, a QoS {inflight.qos} message {step}",
                ReasonCode.PROTOCOL_ERROR,
            )
        )
        return True

    # -- output ---------------------------------------------------------

    def send(self, packet: Packet) -> None:
        if not self.closed:
            self._emit(encode(packet, self.protocol_level))

    def acknowledge(self, packet_type: PacketType, packet_id: int, reason_code: int = 0) -> None:
        """Queue PUBACK, PUBREC, PUBREL or PUBCOMP (`encode_ack`: no packet object), with
        an MQTT 5.0 reason code (ignored at 3.1/3.1.1, which have none)."""
        if self.closed:
            return
        peer = self.peer5
        if peer is None:
            self._emit(encode_ack(packet_type, packet_id))
            return
        self._emit(peer.acknowledgement(packet_type, packet_id, reason_code))

    def send_bytes(self, data: bytes) -> None:
        """Queue already encoded bytes."""
        if not self.closed:
            self._emit(data)

    def send_frame_qos0(self, frame: bytes) -> None:
        """A 3.1/3.1.1 QoS 0 PUBLISH already encoded, shared by many subscribers
        (`Message.frame_qos0`). A bridge's dialer renames its topic (dialer.py)."""
        if not self.closed:
            self._emit(frame)

    def deliver(
        self,
        topic: bytes,
        payload: bytes,
        qos: int,
        retain: bool,
        ref: object,
        now: float,
        send: bool = True,
        properties: bytes = b"",
    ) -> int:
        """Track a QoS 1/2 PUBLISH until acknowledged and send it; returns its packet id.

        With `send=False` the message is only tracked: the owner writes the bytes
        (`publish_bytes`) once its packet id is durable, so that after a crash the
        message is re-sent with the same id and DUP=1, never as a new message.

        MQTT 5.0: `properties` are the PUBLISH's properties, encoded without their length.
        0 when the PUBLISH would exceed the client's Maximum Packet Size: nothing is
        tracked, and the owner drops the message for this client [MQTT-3.1.2-25].
        """
        flows = self.flows
        if flows is None:
            raise LocalProtocolError("deliver() before accept()")
        if self.peer5 is None:
            inflight = flows.track(qos, topic, payload, retain, ref, now)
            if send and not self.closed:
                self._emit(encode_publish(topic, payload, qos, retain, False, inflight.packet_id))
            return inflight.packet_id
        peer = self.peer5
        if not peer.fits(topic, payload, qos, properties):
            return 0
        inflight = flows.track(qos, topic, payload, retain, ref, now, properties=properties)
        if send and not self.closed:
            self._emit(peer.encode_publish(inflight, False))
        return inflight.packet_id

    def send_publish(self, topic: bytes, payload: bytes, retain: bool, properties: bytes) -> bool:
        """MQTT 5.0: send a QoS 0 PUBLISH; False when it exceeds the client's Maximum Packet
        Size (dropped). 3.1/3.1.1 QoS 0 PUBLISHes are shared frames (`send_bytes`)."""
        peer = self.peer5
        assert peer is not None
        if not peer.fits(topic, payload, 0, properties):
            return False
        if not self.closed:
            inflight = Inflight(0, 0, topic, payload, retain, None, properties=properties)
            self._emit(peer.encode_publish(inflight, False))
        return True

    def publish_bytes(self, packet_id: int) -> bytes | None:
        """The first PUBLISH of a tracked message, or None if it is no longer in flight."""
        flows = self.flows
        inflight = flows.outbound.get(packet_id) if flows is not None else None
        if inflight is None or inflight.state is not InflightState.PUBLISHED:
            return None
        return publish_frame(inflight, self.peer5, False)

    def data_to_send(self) -> bytes:
        out = self._out
        if out is NO_OUTPUT:
            return b""
        self._out = NO_OUTPUT
        data = out[0] if len(out) == 1 else b"".join(out)
        self.bytes_sent += len(data)
        return data
