"""The client role of one MQTT connection between brokers, without I/O.

Theory of operation
-------------------
A broker that dials a neighbour (a link, docs/network.md section 3) or another broker (a
bridge, section 8) is that server's client. `DialConnection` is a `Connection`
(connection.py) that opens with a CONNECT instead of waiting for one. Once connected, the
owner uses it as it uses a server-side connection: the session's `Flows`, `deliver`,
`acknowledge`, `resend_inflight`, `data_to_send`, `close`, `connection_lost`,
`next_timer`/`handle_timer`. A PUBLISH exchange in either direction reports the events
it would report on the server side (`MessageReceived`, `MessageReleased`,
`DeliveryAcknowledged`, `DeliveryReceived`). Only the handshake and the keep-alive differ.
Bytes go in through `receive_data(data, now)` and come out of `data_to_send()`. Time is
an argument, never read.

States: AWAIT_CONNACK -> CONNECTING -> CONNECTED -> CLOSED.

* The constructor queues the CONNECT (AWAIT_CONNACK). Until CONNACK the dialer reads one
  packet at a time. The first must be CONNACK (or, at 5.0, a DISCONNECT). Anything else
  (a PUBLISH above all) is a protocol error. No CONNACK within `connect_timeout`:
  `ConnectionClosed` from `handle_timer`.
* CONNACK 0 (5.0: a reason code below 0x80) -> `ConnectAcknowledged` and state
  CONNECTING. The bytes that came with or after the CONNACK wait undecoded in the decoder
  (`has_buffered_input`), as they do after CONNECT on the server side: they may be the
  server's re-sends for the session (DUP=1 PUBLISH, PUBREL), which need the session's
  flows. The owner answers with `attach(flows, now)`, which does what `Connection.accept`
  does after its CONNACK: it limits the window to the server's Receive Maximum, re-sends
  what is in flight in order (DUP=1 PUBLISH, or PUBREL for a released QoS 2 message) and
  sets state CONNECTED. The owner then calls `receive_data(b"", now)` to read what waited.
* A refusing CONNACK -> `ConnectAcknowledged` with its code, then `ConnectionClosed`
  whose reason names the code ("CONNACK 5 not authorized", "CONNACK 0x87 not authorized:
  <reason string>"). A CONNACK with session present after a clean session (or clean
  start) is a protocol error (3.1.1 [MQTT-3.2.2-1], 5.0 [MQTT-3.2.2-2]).

Keep-alive (MQTT 3.1.1 section 3.1.2.10, the client's side): a PINGREQ goes out when
nothing was sent for `keepalive` seconds. One also goes out when nothing was received for
that long and no PINGREQ is outstanding, because a busy sender would otherwise never hear
from a dead server. When nothing at all is received for 1.5 x `keepalive`, the
connection closes ("no answer from the server within 1.5 x keep-alive"). A PINGRESP is
taken silently. A 5.0 server's Server Keep Alive replaces the CONNECT's keep-alive. The
owner writes the bytes, and `data_to_send()` takes no time, so the dialer only notices
output the next time it is given a clock (`receive_data`, `handle_timer`, `attach`).
Output found then is dated at the previous such call. That is never later than it really
went out, so a PINGREQ may come early but never late.

Subscriptions (bridges): `subscribe(filters, properties)` and `unsubscribe(filters,
properties)` return the packet id. The SUBACK comes back as `SubscribeAcknowledged`, the
UNSUBACK as `UnsubscribeAcknowledged`. Each filter's int is the requested QoS at
3.1/3.1.1, and at 5.0 the subscription options byte (`subscription_options`: QoS, No
Local, Retain As Published, Retain Handling), the form `Subscribe.topics` has. Their packet
ids come from the session's `Flows`, which hands them out in turn, so they do not collide
with a PUBLISH in flight, and so both need `attach` first.

Private bridge levels: with `bridge=True` (3.1/3.1.1) the CONNECT's protocol level byte is
0x80 | level, Mosquitto's `try_private`, and such a server treats the connection as a
bridge's (no local echo, RETAIN kept). Only that byte changes. The connection speaks the
level itself. A bridge's topics have other names on the remote broker: `rename` maps the
topic of every PUBLISH the owner sends (`deliver`, `send_publish`, `send_frame_qos0`), and
`outgoing_retain=False` clears RETAIN on them (Mosquitto's `bridge_outgoing_retain`).

MQTT 5.0 (`mqtt5`, the dialer's own `ServerLimits5`, required at level 5): the CONNECT
states the limits the dialer holds the server to. It takes Receive Maximum and Topic Alias
Maximum from `mqtt5` and Maximum Packet Size from `max_packet_size`, unless its own
properties already state them. An incoming PUBLISH is checked against these limits as on
the server side (`Peer5.check_publish`), and topic aliases the server sets are resolved.
The CONNACK's Receive Maximum, Maximum Packet Size and Topic Alias Maximum make the
connection's `Peer5`, which bounds what goes out. The CONNACK's Maximum QoS and Retain
Available are kept for the owner (`maximum_qos`, `retain_available`), which must not send
above them. A DISCONNECT from the server ends in `ConnectionClosed` with its reason code
and Reason String.

Errors: packets a server never sends (CONNECT, SUBSCRIBE, UNSUBSCRIBE, PINGREQ, AUTH, a
second CONNACK, and DISCONNECT at 3.1/3.1.1) are protocol errors, and so is a SUBACK or
UNSUBACK that answers no request or carries the wrong number of codes. At 5.0 the dialer
sends a DISCONNECT with the reason code before it closes, before CONNACK too. A
server-only code goes out as 0x80. The keep-alive and CONNECT timeouts close without a
DISCONNECT, since the server is not answering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .codec import encode, encode_publish
from .connection import Connection, ConnectionState
from .dial_packets import (
    check_filter,
    connack_refusal,
    known_reason,
    packet_size,
    reason_label,
    server_details,
    split_frame_qos0,
    stated_limits,
)
from .errors import LocalProtocolError, PacketIdsExhausted
from .events import (
    ConnectAcknowledged,
    ConnectionClosed,
    Event,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from .flows import MAX_PACKET_ID, Flows
from .packets import (
    PROTOCOL_NAMES,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingResp,
    ProtocolLevel,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from .peer5 import Peer5, ServerLimits5
from .property_table import Properties
from .reasons import ReasonCode, pre_5_refusal

PINGREQ_BYTES = b"\xc0\x00"

_MQTT_5 = 5
_SUBSCRIBE = PacketType.SUBSCRIBE
_UNSUBSCRIBE = PacketType.UNSUBSCRIBE
# The DISCONNECT reason codes a client may send (MQTT 5.0 section 3.14.2.1); the others are
# the server's, and go out as 0x80.
_CLIENT_DISCONNECT_REASONS = frozenset(
    (0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99)
)


class DialConnection(Connection):
    """Client-side MQTT 3.1/3.1.1/5.0 connection to another broker (see module docstring)."""

    __slots__ = (
        "_clean_start",
        "_early",
        "_last_sent",
        "_outgoing_retain",
        "_pinged_at",
        "_rename",
        "_requests",
        "_seen_at",
        "_sent_mark",
        "_window",
        "connect",
        "maximum_qos",
        "retain_available",
    )

    def __init__(
        self,
        connect: Connect,
        *,
        now: float,
        bridge: bool = False,
        max_packet_size: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        retry_interval: float = 20.0,
        mqtt5: ServerLimits5 | None = None,
        rename: Callable[[bytes], bytes] | None = None,
        outgoing_retain: bool = True,
    ) -> None:
        level = connect.protocol_level
        limits: ServerLimits5 | None = None
        if level == _MQTT_5:
            if mqtt5 is None:
                raise ValueError("an MQTT 5.0 CONNECT needs the dialer's own limits (mqtt5)")
            if bridge:
                raise ValueError("private bridge levels (0x80 | level) are MQTT 3.1/3.1.1 only")
            connect, limits = stated_limits(connect, mqtt5, max_packet_size)
            max_packet_size = limits.maximum_packet_size
        elif level == ProtocolLevel.MQTT_3_1 or level == ProtocolLevel.MQTT_3_1_1:
            connect = connect.copy()
            connect.bridge = bridge
            connect.protocol_name = PROTOCOL_NAMES[level]
        else:
            raise ValueError(f"protocol level must be 3, 4 or 5, got {level}")
        super().__init__(
            now=now,
            max_packet_size=max_packet_size,
            connect_timeout=connect_timeout,
            retry_interval=retry_interval,
            mqtt5=limits,
        )
        self.state = ConnectionState.AWAIT_CONNACK
        self.protocol_level = level  # also the decoder's (the base class's) level
        self.keepalive = connect.keepalive
        # The CONNECT as sent: with the limits it states (5.0), or the private level byte.
        self.connect = connect
        self.bridge = bridge
        self._rename = rename
        self._outgoing_retain = outgoing_retain
        # The server's Maximum QoS and Retain Available (5.0 CONNACK): for the owner.
        self.maximum_qos = 2
        self.retain_available = True
        self._clean_start = connect.clean_session
        self._early = bytearray()  # the bytes of the first packet while it is incomplete
        # Packet id -> (SUBSCRIBE or UNSUBSCRIBE, number of topic filters) awaiting its ack.
        self._requests: dict[int, tuple[PacketType, int]] = {}
        # 1.5 x keep-alive once CONNACK set it (0: none). The base class's keep-alive window
        # is 0 (`_keepalive_window`): a server's silence is judged here.
        self._window = 0.0
        self._emit(encode(connect, level))
        self._last_sent = now  # when something was last sent, at the latest (see `_observe`)
        self._seen_at = now  # the last time given
        self._pinged_at = now  # the last PINGREQ (none outstanding while <= last_received)
        self._sent_mark = self.bytes_sent + len(self._out)

    # -- input ----------------------------------------------------------

    def receive_data(self, data: bytes, now: float, max_packets: int = 0) -> list[Event]:
        """Feed bytes read from the server; returns the events they complete (at most
        `max_packets` packets' worth, as `Connection.receive_data`)."""
        state = self.state
        if state is ConnectionState.CLOSED:
            self.input_held = False
            return []
        self._observe(now)
        if state is not ConnectionState.AWAIT_CONNACK:
            return super().receive_data(data, now, max_packets)
        self.input_held = False
        return self._receive_first(data, now)

    def _receive_first(self, data: bytes, now: float) -> list[Event]:
        """Before CONNACK: the first packet alone; what follows it stays in the decoder."""
        self.bytes_received += len(data)
        early = self._early
        early += data
        size = packet_size(early)
        if size < 0:
            return [
                self._end(
                    "malformed packet: remaining length is longer than 4 bytes",
                    ReasonCode.MALFORMED_PACKET,
                )
            ]
        limit = self.max_packet_size
        if size > limit:
            return [
                self._end(
                    f"packet too large: packet of {size} bytes exceeds the maximum packet size "
                    f"of {limit} bytes",
                    ReasonCode.PACKET_TOO_LARGE,
                )
            ]
        if size == 0 or len(early) < size:
            return []
        chunk = bytes(early[:size])
        rest = bytes(early[size:])
        early.clear()
        old_refusal = pre_5_refusal(chunk) if self.protocol_level == _MQTT_5 else None
        if old_refusal is not None:
            # A server that does not speak 5.0 refuses it as 3.1.1 does, in a 3.1.1 CONNACK
            # (return code 1, [MQTT-3.1.2-2]): a refusal, not a malformed 5.0 CONNACK.
            events: list[Event] = []
            self._connack(ConnAck(old_refusal, False), events)
            return events
        packets, error = self.feed_partial(chunk)
        if error is not None:
            code = known_reason(error.reason)
            return [self._end(f"{code.name.lower().replace('_', ' ')}: {error}", code)]
        self.last_received = now
        events = []
        packet = packets[0]
        kind = type(packet)
        if kind is ConnAck:
            assert isinstance(packet, ConnAck)
            self._connack(packet, events)
        elif kind is Disconnect and self.protocol_level == _MQTT_5:
            assert isinstance(packet, Disconnect)
            self._disconnected(packet, events)
        else:
            events.append(
                self._end(f"{packet.packet_type.name} before CONNACK", ReasonCode.PROTOCOL_ERROR)
            )
        if self.state is ConnectionState.CONNECTING:
            self.append(rest)  # read after attach()
        return events

    def _connack(self, packet: ConnAck, events: list[Event]) -> None:
        code = packet.return_code
        props = packet.properties
        level = self.protocol_level
        if code >= 0x80 if level == _MQTT_5 else code != 0:
            events.append(ConnectAcknowledged(code, packet.session_present, props))
            reason, reason_code = connack_refusal(code, level, props)
            self._close(reason)
            events.append(ConnectionClosed(reason, False, reason_code))
            return
        if packet.session_present and self._clean_start:
            what = "clean start" if level == _MQTT_5 else "clean session"
            events.append(
                self._end(f"CONNACK with session present after a {what}", ReasonCode.PROTOCOL_ERROR)
            )
            return
        keepalive = self.keepalive
        if level == _MQTT_5:
            # The server's limits, read as a client's.
            self.peer5 = Peer5.from_connect(props, server=True)
            if props is not None:
                if props.server_keep_alive is not None:
                    keepalive = props.server_keep_alive
                if props.maximum_qos is not None:
                    self.maximum_qos = props.maximum_qos
                if props.retain_available is not None:
                    self.retain_available = props.retain_available == 1
        self.keepalive = keepalive
        self._window = 1.5 * keepalive
        self.state = ConnectionState.CONNECTING
        self._connect_deadline = None
        events.append(ConnectAcknowledged(code, packet.session_present, props))

    def _handle(self, packet: Packet, now: float, events: list[Event]) -> None:
        """A packet after `attach` (CONNECTED): the PUBLISH exchanges are `Connection`'s."""
        kind = type(packet)
        if kind is Publish or kind is PubAck or kind is PubRec or kind is PubComp or kind is PubRel:
            super()._handle(packet, now, events)
        elif kind is PingResp:
            pass  # `last_received` is all it is for
        elif kind is SubAck:
            assert isinstance(packet, SubAck)
            if self._answers(_SUBSCRIBE, packet.packet_id, packet.return_codes, events):
                events.append(
                    SubscribeAcknowledged(
                        packet.packet_id, list(packet.return_codes), packet.properties
                    )
                )
        elif kind is UnsubAck:
            assert isinstance(packet, UnsubAck)
            if self._answers(_UNSUBSCRIBE, packet.packet_id, packet.reason_codes, events):
                events.append(
                    UnsubscribeAcknowledged(
                        packet.packet_id, list(packet.reason_codes), packet.properties
                    )
                )
        elif kind is Disconnect and self.protocol_level == _MQTT_5:
            assert isinstance(packet, Disconnect)
            self._disconnected(packet, events)
        elif kind is ConnAck:
            events.append(self._end("a second CONNACK", ReasonCode.PROTOCOL_ERROR))
        else:
            events.append(
                self._end(
                    f"a server may not send {packet.packet_type.name}", ReasonCode.PROTOCOL_ERROR
                )
            )

    def _answers(
        self, kind: PacketType, packet_id: int, codes: list[int], events: list[Event]
    ) -> bool:
        """True when a SUBACK/UNSUBACK answers the request `packet_id` of `kind` with one code
        per topic filter (a 3.1/3.1.1 UNSUBACK has none); else the connection failed."""
        name = "SUBACK" if kind is _SUBSCRIBE else "UNSUBACK"
        request = self._requests.get(packet_id)
        if request is None or request[0] is not kind:
            problem = f"{name} for packet id {packet_id}, which no {kind.name} awaits"
        elif codes and len(codes) != request[1]:
            problem = (
                f"{name} for packet id {packet_id} has {len(codes)} codes "
                f"for {request[1]} topic filters"
            )
        else:
            del self._requests[packet_id]
            return True
        events.append(self._end(problem, ReasonCode.PROTOCOL_ERROR))
        return False

    def _disconnected(self, packet: Disconnect, events: list[Event]) -> None:
        """MQTT 5.0: the server closes the connection, and says why."""
        code = packet.reason_code
        reason = f"server sent DISCONNECT {reason_label(code)}{server_details(packet.properties)}"
        self._close(reason)
        events.append(ConnectionClosed(reason, True, known_reason(code)))

    # -- answers and requests from the owner ----------------------------

    def attach(self, flows: Flows, now: float) -> list[object]:
        """Answer CONNACK 0 (`ConnectAcknowledged`) with the session's flows: limits the
        window to the server's Receive Maximum and re-sends what is in flight, as
        `Connection.accept` does. Then call `receive_data(b"", now)` for what came after
        the CONNACK. Returns the refs of in-flight messages dropped as larger than the
        server's Maximum Packet Size (see `resend_inflight`)."""
        if self.state is not ConnectionState.CONNECTING:
            raise LocalProtocolError(
                f"attach() in state {self.state.value}: it answers an accepting CONNACK"
            )
        self._observe(now)
        self.flows = flows
        flows.connection_number += 1
        self.state = ConnectionState.CONNECTED
        peer = self.peer5
        flows.limit_window(peer.receive_maximum if peer is not None else flows.configured_inflight)
        if flows.outbound:
            return self.resend_inflight(now)
        return []

    # -- what goes out: a bridge's renamed topics -------------------------

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
        """`Connection.deliver`, under the remote name of the topic (`rename`). The
        in-flight copy keeps that name, so re-sends carry it too."""
        rename = self._rename
        if rename is not None:
            topic = rename(topic)
            retain = retain and self._outgoing_retain
        return super().deliver(topic, payload, qos, retain, ref, now, send, properties)

    def send_publish(self, topic: bytes, payload: bytes, retain: bool, properties: bytes) -> bool:
        rename = self._rename
        if rename is not None:
            topic = rename(topic)
            retain = retain and self._outgoing_retain
        return super().send_publish(topic, payload, retain, properties)

    def send_frame_qos0(self, frame: bytes) -> None:
        rename = self._rename
        if rename is None:
            super().send_frame_qos0(frame)
            return
        topic, payload, retain = split_frame_qos0(frame)
        retain = retain and self._outgoing_retain
        super().send_frame_qos0(encode_publish(rename(topic), payload, 0, retain, False, 0))

    def subscribe(
        self, filters: Sequence[tuple[str, int]], properties: Properties | None = None
    ) -> int:
        """Send SUBSCRIBE; returns its packet id (`SubscribeAcknowledged` answers it).

        `filters`: (topic filter, requested QoS) at 3.1/3.1.1, (topic filter, subscription
        options byte, see `subscription_options`) at 5.0. ValueError for an invalid filter,
        QoS or options, or properties below 5.0."""
        level5 = self.protocol_level == _MQTT_5
        for topic_filter, options in filters:
            check_filter(topic_filter)
            if not level5 and options not in (0, 1, 2):
                raise ValueError(
                    f"topic filter {topic_filter!r}: MQTT 3.1/3.1.1 takes a QoS of 0, 1 or 2, "
                    f"not {options} (subscription options are MQTT 5.0's)"
                )
        packet_id = self._request_id(len(filters), properties)
        packet = Subscribe(packet_id, list(filters), properties=properties)
        self._emit(encode(packet, self.protocol_level))
        self._requests[packet_id] = (_SUBSCRIBE, len(filters))
        return packet_id

    def unsubscribe(self, filters: Sequence[str], properties: Properties | None = None) -> int:
        """Send UNSUBSCRIBE; returns its packet id (`UnsubscribeAcknowledged` answers it)."""
        for topic_filter in filters:
            check_filter(topic_filter)
        packet_id = self._request_id(len(filters), properties)
        packet = Unsubscribe(packet_id, list(filters), properties=properties)
        self._emit(encode(packet, self.protocol_level))
        self._requests[packet_id] = (_UNSUBSCRIBE, len(filters))
        return packet_id

    def _request_id(self, count: int, properties: Properties | None) -> int:
        """A packet id for a SUBSCRIBE or UNSUBSCRIBE of `count` filters: one no PUBLISH in
        flight and no request awaiting its answer has."""
        flows = self.flows
        if self.closed or flows is None:
            raise LocalProtocolError("SUBSCRIBE/UNSUBSCRIBE needs a connection after attach()")
        if not count:
            raise ValueError("SUBSCRIBE/UNSUBSCRIBE needs at least one topic filter")
        if properties is not None and self.protocol_level != _MQTT_5:
            raise ValueError("SUBSCRIBE/UNSUBSCRIBE properties need MQTT 5.0")
        requests = self._requests
        if len(requests) + len(flows.outbound) >= MAX_PACKET_ID:
            raise PacketIdsExhausted("all 65,535 packet identifiers are in use")
        while True:
            packet_id = flows.allocate_packet_id()
            if packet_id not in requests:
                return packet_id

    def close(
        self, reason: str, code: ReasonCode = ReasonCode.ADMINISTRATIVE_ACTION
    ) -> ConnectionClosed:
        """Close from this side (shutdown, a CONNACK the owner does not like, limits); an
        MQTT 5.0 server is told why in DISCONNECT, also before CONNACK."""
        return self._end(reason, code)

    def _end(self, reason: str, code: ReasonCode) -> ConnectionClosed:
        """End the connection for `reason`: at 5.0 a DISCONNECT with the code first (0x80
        for a code only a server sends), in any state."""
        if not self.closed and self.protocol_level == _MQTT_5:
            sent = code if code in _CLIENT_DISCONNECT_REASONS else ReasonCode.UNSPECIFIED_ERROR
            peer = self.peer5
            self._emit((peer if peer is not None else Peer5()).disconnect(sent, reason))
        self._close(reason)
        return ConnectionClosed(reason, False, code)

    def _lost(self, reason: str) -> ConnectionClosed:
        """The server does not answer: closed without a word."""
        self._close(reason)
        return ConnectionClosed(reason, False, ReasonCode.KEEP_ALIVE_TIMEOUT)

    # -- time -----------------------------------------------------------

    def _observe(self, now: float) -> None:
        """Date output that appeared since the last time given (see the module docstring)."""
        mark = self.bytes_sent + len(self._out)  # grows with every packet queued or written
        if mark != self._sent_mark:
            self._sent_mark = mark
            if self._seen_at > self._last_sent:
                self._last_sent = self._seen_at
        self._seen_at = now

    def _keepalive_window(self) -> float:
        """0: nothing for the base class to judge; the server's silence is `_window`'s."""
        return 0.0

    def next_timer(self) -> float | None:
        """When `handle_timer` should next be called, or None."""
        state = self.state
        if state is ConnectionState.AWAIT_CONNACK:
            return self._connect_deadline
        deadline = super().next_timer()  # MQTT 3.1 re-sends
        window = self._window
        if state is ConnectionState.CLOSED or not window:
            return deadline
        keepalive = self.keepalive
        received = self.last_received
        ping_at = self._last_sent + keepalive
        if self._pinged_at <= received:
            ping_at = min(ping_at, received + keepalive)
        mine = min(ping_at, received + window)
        return mine if deadline is None else min(deadline, mine)

    def handle_timer(self, now: float) -> list[Event]:
        """Act on expired deadlines: CONNACK timeout, PINGREQ, no answer, 3.1 re-sends."""
        state = self.state
        if state is ConnectionState.AWAIT_CONNACK:
            deadline = self._connect_deadline
            if deadline is not None and now >= deadline:
                timeout = self._settings.connect_timeout
                return [self._lost(f"no CONNACK within the connect timeout ({timeout:g} s)")]
            return []
        if state is ConnectionState.CLOSED:
            return []
        window = self._window
        if window:
            self._observe(now)
            received = self.last_received
            if now >= received + window:
                return [
                    self._lost(f"no answer from the server within 1.5 x keep-alive ({window:g} s)")
                ]
            keepalive = self.keepalive
            if now >= self._last_sent + keepalive or (
                self._pinged_at <= received and now >= received + keepalive
            ):
                self._emit(PINGREQ_BYTES)
                self._pinged_at = now
                self._last_sent = now
                self._sent_mark = self.bytes_sent + len(self._out)
        return super().handle_timer(now)
