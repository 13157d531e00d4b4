"""The server side of one MQTT connection, without I/O.

Theory of operation
-------------------
Bytes go in through `receive_data(data, now)`, which returns events; bytes to
write come out of `data_to_send()`. Time is an argument, never read: the owner
asks `next_timer()` when it wants to be called back and then calls
`handle_timer(now)`. The owner (the broker) answers events by calling methods
(`accept`, `refuse`, `send`, `deliver`, `close`).

States: AWAIT_CONNECT -> CONNECTING -> CONNECTED -> CLOSED. Bytes that arrive
after CONNECT are buffered, not decoded, until the owner answers it with
`accept` or `refuse`, so nothing is answered before the CONNACK; after
`accept` the owner calls `receive_data(b"", now)` to process them. Enhanced
authentication (5.0) loops CONNECTING -> AUTHENTICATING -> CONNECTING: the
owner answers with `continue_authentication` (AUTH 0x18 to the client), the
connection reads the client's AUTH alone and reports it (`AuthRequested`).
Rules enforced here:

* the first packet must be CONNECT, and only one CONNECT is allowed; what it
  asks for, and whether it is refused before the owner sees it (an unsupported
  level, client identifier rules), is decided by handshake.py;
* packets a client never sends (CONNACK, SUBACK, ...) close the connection;
* PINGREQ is answered here; keep-alive expiry (1.5 x the keep-alive) and the
  CONNECT timeout close the connection;
* outbound QoS 1/2 bookkeeping through the session's `Flows`, re-sending in
  order with DUP=1 on resumption, and, for MQTT 3.1 peers, after
  `retry_interval` seconds without an answer. On PUBREC the owner sends PUBREL
  (`DeliveryReceived`), once it has recorded the released state.

Any protocol violation ends in `ConnectionClosed` with the reason; after it
the connection ignores input. Acknowledgements of *incoming* QoS 1/2
publications are left to the owner, which sends them once the message is
durable.

MQTT 5.0 (when the owner gives `mqtt5`, the server's `ServerLimits5`): the client's
limits, its aliases and the 5.0 packets the server writes are a `Peer5` (peer5.py).
An error after CONNACK is a DISCONNECT with its reason code before the close;
incoming PUBLISHes are held to the limits, outgoing ones to the client's Receive
Maximum and Maximum Packet Size (`deliver` returns 0 for a message too large).
"""

from __future__ import annotations

import enum

from .codec import PINGRESP_BYTES, Decoder, encode, encode_ack, encode_publish
from .errors import LocalProtocolError
from .events import (
    AuthRequested,
    ConnectionClosed,
    ConnectRequested,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    Event,
    MessageReceived,
    MessageReleased,
    SubscribeRequested,
    UnsubscribeRequested,
)
from .flows import Flows, Inflight, InflightState
from .handshake import accept_bytes, check_connect, connack_problem, refusal_bytes
from .packets import (
    Auth,
    Connect,
    ConnectReturnCode,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    ProtocolLevel,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Unsubscribe,
)
from .peer5 import Peer5, ServerLimits5
from .reasons import ReasonCode

_PUBACK = PacketType.PUBACK
_PUBREC = PacketType.PUBREC


class ConnectionState(enum.Enum):
    AWAIT_CONNECT = "await-connect"
    # DialConnection (dialer.py), the client role: CONNECT sent; waiting for CONNACK.
    AWAIT_CONNACK = "await-connack"
    # CONNECT received; waiting for accept() or refuse(). DialConnection: CONNACK 0
    # received; waiting for attach() (input is buffered alike).
    CONNECTING = "connecting"
    AUTHENTICATING = "authenticating"  # the server sent AUTH 0x18; waiting for the client's
    CONNECTED = "connected"
    CLOSED = "closed"


class Connection:
    """Server-side MQTT 3.1/3.1.1/5.0 connection state machine (see module docstring)."""

    __slots__ = (
        "_closed_reason",
        "_connect_deadline",
        "_connect_timeout",
        "_decoder",
        "_keepalive_window",
        "_limits5",
        "_out",
        "_waiting",
        "bridge",
        "bytes_received",
        "bytes_sent",
        "closed",
        "flows",
        "input_held",
        "keepalive",
        "last_received",
        "peer5",
        "protocol_level",
        "retry_interval",
        "state",
    )

    def __init__(
        self,
        *,
        now: float,
        max_packet_size: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        retry_interval: float = 20.0,
        mqtt5: ServerLimits5 | None = None,
    ) -> None:
        self.state = ConnectionState.AWAIT_CONNECT
        # `state is CLOSED`, kept as a plain attribute: read several times per packet.
        self.closed = False
        self._limits5 = mqtt5
        # The client's side at level 5; None at 3.1/3.1.1 (or before CONNECT).
        self.peer5: Peer5 | None = None
        self._decoder = Decoder(max_packet_size=max_packet_size, mqtt5=mqtt5 is not None)
        # The last `receive_data` stopped at its `max_packets` with bytes left to decode.
        self.input_held = False
        self._out: list[bytes] = []
        # MQTT 5.0: packet ids in flight not re-sent yet on this connection: beyond the
        # client's Receive Maximum when it resumed its session (`resend_inflight`).
        self._waiting: list[int] = []
        self._connect_deadline: float | None = now + connect_timeout
        self._connect_timeout = connect_timeout
        self._closed_reason = ""
        self._keepalive_window = 0.0
        self.flows: Flows | None = None
        self.keepalive = 0
        self.last_received = now
        self.protocol_level = int(ProtocolLevel.MQTT_3_1_1)
        self.retry_interval = retry_interval
        self.bytes_received = 0
        self.bytes_sent = 0
        # The peer is a bridge (3.1/3.1.1 CONNECT level 0x80 | level): its subscriptions
        # get No Local and Retain As Published, as Mosquitto gives them (no echo, RETAIN
        # kept). On a dialer: this connection is a bridge's, and says so.
        self.bridge = False

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
            self._decoder.append(data)
            self.input_held = False
            return []
        decoder = self._decoder
        packets, error = decoder.feed_partial(
            data, state is not ConnectionState.CONNECTED, max_packets
        )
        self.input_held = max_packets > 0 and len(packets) == max_packets and decoder.buffered > 0
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
            code = _reason(error.reason)  # "malformed packet: ...", "packet too large: ..."
            events.append(self._fail(f"{code.name.lower().replace('_', ' ')}: {error}", code))
        return events

    @property
    def has_buffered_input(self) -> bool:
        """Bytes wait in the decoder (e.g. those that followed CONNECT)."""
        return self._decoder.buffered > 0

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
            assert isinstance(packet, Subscribe | Disconnect) and self._limits5 is not None
            refusal, problem = peer.check_request(packet, self._limits5)
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
                self._out.append(encode_ack(PacketType.PUBREL, packet.packet_id))
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
            self._out.append(PINGRESP_BYTES)
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
            events.append(ConnectionClosed(self._closed_reason, True, _reason(code)))
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

    def _out_of_turn(self) -> str:
        if self.state is ConnectionState.AUTHENTICATING:
            # [MQTT-3.1.2-30]
            return "a packet other than AUTH or DISCONNECT during authentication"
        return "the first packet is not CONNECT"

    def _auth_received(self, packet: Auth, events: list[Event]) -> None:
        """A step of enhanced authentication from the client, checked (`Peer5.check_auth`)
        and reported; before CONNACK, what follows it waits for the owner's answer."""
        peer = self.peer5
        assert peer is not None
        connected = self.state is ConnectionState.CONNECTED
        problem = peer.check_auth(packet, connected)
        if problem:
            events.append(self._fail(problem, ReasonCode.PROTOCOL_ERROR))
            return
        starts = connected and not peer.reauthenticating
        if connected:
            peer.reauthenticating = True
        else:
            self.state = ConnectionState.CONNECTING
            self._connect_deadline = None
        props = packet.properties
        events.append(AuthRequested(props.authentication_data if props else None, starts))

    def _check_publish5(self, packet: Publish, events: list[Event]) -> bool:
        """An MQTT 5.0 PUBLISH against this connection's limits (`Peer5.check_publish`);
        False when it goes no further: the connection failed, or the PUBLISH is refused in
        its PUBACK/PUBREC (a payload that is not the UTF-8 it says it is)."""
        peer = self.peer5
        limits = self._limits5
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
        if self._waiting:
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

    def _handle_connect(self, packet: Connect, events: list[Event]) -> None:
        verdict = check_connect(packet, self._limits5)
        self.protocol_level = verdict.protocol_level
        self.peer5 = verdict.peer5
        self.bridge = verdict.bridge
        if verdict.problem:
            self._out.append(verdict.reply)
            events.append(self._fail(verdict.problem, verdict.code))
            return
        self.state = ConnectionState.CONNECTING
        self._connect_deadline = None
        self.keepalive = verdict.keepalive
        self._keepalive_window = 1.5 * verdict.keepalive
        events.append(ConnectRequested(packet))

    # -- answers from the owner ----------------------------------------

    def accept(
        self,
        session_present: bool,
        flows: Flows,
        now: float,
        *,
        assigned_client_id: str | None = None,
        session_expiry_interval: int | None = None,
        authentication_data: bytes | None = None,
    ) -> list[object]:
        """Send CONNACK 0 and attach the session's flows; re-sends what is in flight.

        MQTT 5.0: `assigned_client_id` when the server chose the client id,
        `session_expiry_interval` when the server's differs from the client's request, and
        the server's last `authentication_data` after enhanced authentication.
        Returns the refs of in-flight messages dropped because they are larger than the
        client's Maximum Packet Size (see `resend_inflight`).
        """
        self.flows = flows
        flows.connection_number += 1
        self.state = ConnectionState.CONNECTED
        peer = self.peer5
        flows.limit_window(peer.receive_maximum if peer is not None else flows.configured_inflight)
        self._out.append(
            accept_bytes(
                peer,
                self._limits5,
                self.protocol_level,
                session_present,
                self.keepalive,
                assigned_client_id,
                session_expiry_interval,
                authentication_data,
            )
        )
        if flows.outbound:
            return self.resend_inflight(now)
        return []

    def connack_problem(
        self,
        assigned_client_id: str | None,
        session_expiry_interval: int | None,
        authentication_data: bytes | None,
    ) -> str:
        """Why `accept` with these values could not send its CONNACK ("" when it can): at
        MQTT 5.0, a CONNACK larger than the client's Maximum Packet Size. The owner asks
        before it changes anything, and then closes the connection (`close`): nothing is
        sent before CONNACK."""
        return connack_problem(
            self.peer5,
            self._limits5,
            self.keepalive,
            assigned_client_id,
            session_expiry_interval,
            authentication_data,
        )

    def refuse(
        self, return_code: ConnectReturnCode, reason: str, code5: ReasonCode | None = None
    ) -> ConnectionClosed:
        """Send CONNACK with a failure code; the owner closes the transport after flushing.

        At MQTT 5.0 the CONNACK carries `code5` (by default the 5.0 code of `return_code`)
        and the reason as its Reason String.
        """
        reply, code = refusal_bytes(self.peer5, return_code, reason, code5)
        self._out.append(reply)
        return self._fail(reason, code)

    def continue_authentication(self, data: bytes | None, now: float) -> None:
        """MQTT 5.0 enhanced authentication: AUTH 0x18 with the server's `data`; the
        client's answer comes as `AuthRequested`. Before CONNACK, the client has the
        connect timeout to give it (the owner then calls `receive_data(b"", now)` for
        what may wait in the buffer)."""
        peer = self.peer5
        if self.closed or peer is None or peer.auth_method is None:
            raise LocalProtocolError("continue_authentication() without a method in CONNECT")
        self._out.append(peer.auth(ReasonCode.CONTINUE_AUTHENTICATION, data))
        if self.state is ConnectionState.CONNECTING:
            self.state = ConnectionState.AUTHENTICATING
            self._connect_deadline = now + self._connect_timeout

    def reauthenticated(self, data: bytes | None) -> None:
        """A re-authentication succeeded: AUTH 0x00 with the server's last `data`."""
        peer = self.peer5
        if not self.closed and peer is not None and peer.reauthenticating:
            self._out.append(peer.auth(ReasonCode.NORMAL_DISCONNECTION, data))

    # -- output ---------------------------------------------------------

    def resend_inflight(self, now: float) -> list[object]:
        """Re-send every unfinished outbound flow in order: PUBLISH with DUP=1, or PUBREL.

        MQTT 5.0: no more than the client's Receive Maximum (the rest go out as
        acknowledgements free room), and nothing larger than its Maximum Packet Size: such
        a message is dropped; the refs of those are returned.
        """
        flows = self.flows
        if flows is None:
            return []
        out = self._out
        peer = self.peer5
        if peer is None:
            for inflight in flows.outbound.values():
                self._resend(inflight, now, out)
            return []
        resend, self._waiting, dropped = peer.plan_resend(flows)
        for inflight in resend:
            self._resend(inflight, now, out)
        return dropped

    def _send_waiting(self, now: float) -> None:
        """An acknowledgement freed room: the next in-flight PUBLISH not re-sent yet."""
        flows = self.flows
        assert flows is not None
        while self._waiting:
            inflight = flows.outbound.get(self._waiting.pop(0))
            if inflight is not None:
                self._resend(inflight, now, self._out)
                return

    def _resend(self, inflight: Inflight, now: float, out: list[bytes]) -> None:
        inflight.sent_at = now
        if inflight.state is InflightState.RELEASED:
            out.append(encode_ack(PacketType.PUBREL, inflight.packet_id))
        else:
            out.append(_publish_frame(inflight, self.peer5, True))

    def send(self, packet: Packet) -> None:
        if not self.closed:
            self._out.append(encode(packet, self.protocol_level))

    def acknowledge(self, packet_type: PacketType, packet_id: int, reason_code: int = 0) -> None:
        """Queue PUBACK, PUBREC, PUBREL or PUBCOMP (`encode_ack`: no packet object), with
        an MQTT 5.0 reason code (ignored at 3.1/3.1.1, which have none)."""
        if self.closed:
            return
        peer = self.peer5
        if peer is None:
            self._out.append(encode_ack(packet_type, packet_id))
            return
        self._out.append(peer.acknowledgement(packet_type, packet_id, reason_code))

    def send_bytes(self, data: bytes) -> None:
        """Queue already encoded bytes."""
        if not self.closed:
            self._out.append(data)

    def send_frame_qos0(self, frame: bytes) -> None:
        """A 3.1/3.1.1 QoS 0 PUBLISH already encoded, shared by many subscribers
        (`Message.frame_qos0`). A bridge's dialer renames its topic (dialer.py)."""
        if not self.closed:
            self._out.append(frame)

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
                self._out.append(
                    encode_publish(topic, payload, qos, retain, False, inflight.packet_id)
                )
            return inflight.packet_id
        peer = self.peer5
        if not peer.fits(topic, payload, qos, properties):
            return 0
        inflight = flows.track(qos, topic, payload, retain, ref, now, properties=properties)
        if send and not self.closed:
            self._out.append(peer.encode_publish(inflight, False))
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
            self._out.append(peer.encode_publish(inflight, False))
        return True

    def publish_bytes(self, packet_id: int) -> bytes | None:
        """The first PUBLISH of a tracked message, or None if it is no longer in flight."""
        flows = self.flows
        inflight = flows.outbound.get(packet_id) if flows is not None else None
        if inflight is None or inflight.state is not InflightState.PUBLISHED:
            return None
        return _publish_frame(inflight, self.peer5, False)

    def data_to_send(self) -> bytes:
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.bytes_sent += len(data)
        return data

    def close(
        self, reason: str, code: ReasonCode = ReasonCode.ADMINISTRATIVE_ACTION
    ) -> ConnectionClosed:
        """Close from the server side (takeover, shutdown, limits): an abnormal end."""
        return self._fail(reason, code)

    def connection_lost(self, reason: str = "connection lost") -> list[Event]:
        """The transport is gone; reports the end unless it was already reported."""
        if self.state is ConnectionState.CLOSED:
            return []
        self._close(reason)
        return [ConnectionClosed(reason, False, ReasonCode.UNSPECIFIED_ERROR)]

    def _fail(
        self, reason: str, code: ReasonCode = ReasonCode.UNSPECIFIED_ERROR
    ) -> ConnectionClosed:
        """End the connection for `reason`; an MQTT 5.0 client is told why, in DISCONNECT
        past CONNACK, in CONNACK during enhanced authentication."""
        peer = self.peer5
        if peer is not None:
            if self.state is ConnectionState.CONNECTED:
                self._out.append(peer.disconnect(code, reason))
            elif self.state is ConnectionState.AUTHENTICATING:
                self._out.append(peer.refusal(code, reason))
        self._close(reason)
        return ConnectionClosed(reason, False, code)

    def _close(self, reason: str) -> None:
        self.state = ConnectionState.CLOSED
        self.closed = True
        self._closed_reason = reason

    # -- time -----------------------------------------------------------

    @property
    def closed_reason(self) -> str:
        return self._closed_reason

    def next_timer(self) -> float | None:
        """When `handle_timer` should next be called, or None."""
        state = self.state
        if state is ConnectionState.AWAIT_CONNECT or state is ConnectionState.AUTHENTICATING:
            return self._connect_deadline
        if state is ConnectionState.CLOSED:
            return None
        deadline: float | None = None
        if self._keepalive_window:
            deadline = self.last_received + self._keepalive_window
        if (
            self.protocol_level == ProtocolLevel.MQTT_3_1
            and self.flows is not None
            and self.flows.outbound
            and self.retry_interval > 0
        ):
            oldest = min(inflight.sent_at for inflight in self.flows.outbound.values())
            retry_at = oldest + self.retry_interval
            deadline = retry_at if deadline is None else min(deadline, retry_at)
        return deadline

    def handle_timer(self, now: float) -> list[Event]:
        """Act on expired deadlines: CONNECT timeout, keep-alive expiry, 3.1 retries."""
        if self.state is ConnectionState.CLOSED:
            return []
        state = self.state
        if state is ConnectionState.AWAIT_CONNECT or state is ConnectionState.AUTHENTICATING:
            if self._connect_deadline is not None and now >= self._connect_deadline:
                what = "CONNECT" if state is ConnectionState.AWAIT_CONNECT else "AUTH"
                return [
                    self._fail(
                        f"no {what} within the connect timeout", ReasonCode.KEEP_ALIVE_TIMEOUT
                    )
                ]
            return []
        if self._keepalive_window and now >= self.last_received + self._keepalive_window:
            return [
                self._fail(
                    f"keep-alive expired: nothing received for {self._keepalive_window:g} s",
                    ReasonCode.KEEP_ALIVE_TIMEOUT,
                )
            ]
        if (
            self.protocol_level == ProtocolLevel.MQTT_3_1
            and self.flows is not None
            and self.retry_interval > 0
        ):
            for inflight in self.flows.outbound.values():
                if now >= inflight.sent_at + self.retry_interval:
                    self._resend(inflight, now, self._out)
        return []


def _reason(code: int) -> ReasonCode:
    """`code` as a `ReasonCode`, or "unspecified error" for one it does not name."""
    try:
        return ReasonCode(code)
    except ValueError:
        return ReasonCode.UNSPECIFIED_ERROR


def _publish_frame(inflight: Inflight, peer5: Peer5 | None, dup: bool) -> bytes:
    """The PUBLISH of a tracked message, first sent or (`dup`) re-sent."""
    if peer5 is not None:
        return peer5.encode_publish(inflight, dup)
    return encode_publish(
        inflight.topic, inflight.payload, inflight.qos, inflight.retain, dup, inflight.packet_id
    )
