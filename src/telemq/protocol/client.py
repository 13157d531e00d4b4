"""The client side of one MQTT 3.1.1 or 5.0 connection, sans-IO: bytes in, events out.

Theory of operation
-------------------
`ClientConnection` is to a client what `Connection` is to the broker: it owns the packet ids,
the publications in flight and the QoS 2 ids received, and never touches a socket or a clock.
The caller queues packets (`connect`, `publish`, `subscribe`, `disconnect`, `ping`), writes
`data_to_send()` wherever its bytes go, and feeds what it reads to `receive_data`, which
answers the broker's QoS exchanges itself (PUBACK, PUBREC, PUBREL, PUBCOMP are queued for
sending) and returns what the caller needs to know: `ConnectAnswered`, `SubscribeAnswered`,
`MessageArrived`.

`completed` counts the publications, in the order they were given, that are done with: QoS 0
once queued, QoS 1 on PUBACK, QoS 2 on PUBCOMP. A producer that records it as its progress
(the pipeline's sink) repeats at most the window in flight after a crash.

A QoS 2 message the broker sends again under an id whose PUBREL has not come yet is
acknowledged and not reported twice: exactly once on the receiving side too.

At MQTT 5.0 (`protocol_level=5`) a persistent session is asked for with a Session Expiry
Interval, publications may carry properties, a PUBACK or PUBREC with an error reason code
ends its exchange and is kept in `refusals`, and a DISCONNECT from the broker is reported
(`Disconnected`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

from .codec import Decoder, encode, encode_publish
from .codec5 import encode_publish5
from .errors import LocalProtocolError
from .packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
)
from .properties import EMPTY_PROPERTIES_BYTES, encode_properties
from .property_table import Properties, PropertyContext
from .reasons import pre_5_refusal
from .topics import topic_name_error

NO_EXPIRY = 0xFFFFFFFF  # the Session Expiry Interval of a session that never ends


@dataclass(frozen=True, slots=True)
class ConnectAnswered:
    return_code: int
    session_present: bool


@dataclass(frozen=True, slots=True)
class SubscribeAnswered:
    packet_id: int
    return_codes: list[int]


@dataclass(frozen=True, slots=True)
class MessageArrived:
    """A PUBLISH from the broker, already acknowledged (or its PUBREC queued)."""

    publish: Publish


@dataclass(frozen=True, slots=True)
class Disconnected:
    """MQTT 5.0: the broker sent DISCONNECT (it closes the connection next)."""

    reason_code: int
    reason: str


ClientEvent = ConnectAnswered | SubscribeAnswered | MessageArrived | Disconnected


def publish_error(topic: str, qos: int) -> str | None:
    """Why a PUBLISH of `topic` at `qos` cannot be sent, or None."""
    problem = topic_name_error(topic)
    if problem is not None:
        return problem
    if qos not in (0, 1, 2):
        return f"QoS must be 0, 1 or 2, got {qos}"
    return None


class ClientConnection:
    """The client side of one connection (see module docstring)."""

    def __init__(self, window: int = 64, protocol_level: int = 4) -> None:
        if protocol_level not in (4, 5):
            raise ValueError(f"protocol level must be 4 (MQTT 3.1.1) or 5, got {protocol_level}")
        self.window = max(1, window)  # publications in flight at most
        self.protocol_level = protocol_level
        self.completed = 0
        # MQTT 5.0: (packet id, reason code) of publications the broker refused.
        self.refusals: list[tuple[int, int]] = []
        self._decoder = Decoder(protocol_level=protocol_level)
        self._out: list[bytes] = []
        self._next_id = 1
        self._inflight: dict[int, int] = {}  # packet id -> position in the publish order
        self._subscribing: set[int] = set()
        self._order: collections.deque[int] = collections.deque()  # positions not yet counted
        self._done: set[int] = set()  # positions done, waiting for those before them
        self._published = 0
        self._held_qos2: set[int] = set()  # incoming QoS 2 ids received, PUBREL not yet seen
        self._awaiting_connack = False

    # -- what the client sends ------------------------------------------------------------

    def connect(
        self,
        client_id: str,
        *,
        clean_session: bool = True,
        keepalive: int = 60,
        username: str | None = None,
        password: bytes | None = None,
        session_expiry_interval: int | None = None,
    ) -> None:
        """Queue CONNECT. At MQTT 5.0 `clean_session` is Clean Start, and a session that is
        not clean lasts `session_expiry_interval` seconds (by default: for ever)."""
        props = None
        if self.protocol_level == 5:
            expiry = session_expiry_interval
            if expiry is None:
                expiry = 0 if clean_session else NO_EXPIRY
            props = Properties(session_expiry_interval=expiry or None)
        self._out.append(
            encode(
                Connect(
                    client_id=client_id,
                    protocol_level=self.protocol_level,
                    clean_session=clean_session,
                    keepalive=keepalive,
                    username=username,
                    password=password,
                    properties=props,
                )
            )
        )
        self._awaiting_connack = True

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    @property
    def window_full(self) -> bool:
        return len(self._inflight) >= self.window

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        """Queue one PUBLISH. ValueError for a bad topic or QoS, or properties at 3.1.1;
        LocalProtocolError when the window is full (wait for acknowledgements first:
        `window_full`)."""
        problem = publish_error(topic, qos)
        if problem is not None:
            raise ValueError(problem)
        if properties is not None and self.protocol_level != 5:
            raise ValueError("PUBLISH properties need MQTT 5.0 (protocol level 5)")
        if qos and self.window_full:
            raise LocalProtocolError(f"{self.window} publications are already in flight")
        position = self._published
        self._published += 1
        self._order.append(position)
        packet_id = self._allocate() if qos else 0
        if qos:
            self._inflight[packet_id] = position
        if self.protocol_level == 5:
            block = (
                EMPTY_PROPERTIES_BYTES
                if properties is None
                else encode_properties(properties, PropertyContext.PUBLISH)
            )
            frame = encode_publish5(
                topic.encode("utf-8"), payload, qos, retain, False, packet_id, block
            )
        else:
            frame = encode_publish(topic.encode("utf-8"), payload, qos, retain, False, packet_id)
        self._out.append(frame)
        if not qos:
            self._finish(position)

    def subscribe(self, filters: Iterable[tuple[str, int]]) -> int:
        """Queue a SUBSCRIBE; returns its packet id (see `SubscribeAnswered`)."""
        packet_id = self._allocate()
        self._subscribing.add(packet_id)
        self._out.append(encode(Subscribe(packet_id, list(filters)), self.protocol_level))
        return packet_id

    def ping(self) -> None:
        self._out.append(encode(PingReq(), self.protocol_level))

    def disconnect(self) -> None:
        self._out.append(encode(Disconnect(), self.protocol_level))

    def data_to_send(self) -> bytes:
        data = b"".join(self._out)
        self._out.clear()
        return data

    # -- what the broker sends --------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[ClientEvent]:
        """Handle bytes from the broker; raises `MalformedPacket` for bytes that are not MQTT."""
        events: list[ClientEvent] = []
        if self._awaiting_connack and self.protocol_level == 5:
            refusal = pre_5_refusal(bytes(data[:4]))
            if refusal is not None:  # a broker without 5.0
                self._awaiting_connack = False
                return [ConnectAnswered(refusal, False)]
        for packet in self._decoder.feed(data):
            if isinstance(packet, ConnAck):
                self._awaiting_connack = False
                events.append(ConnectAnswered(packet.return_code, packet.session_present))
            elif isinstance(packet, PubAck | PubComp):
                self._complete(packet.packet_id, packet.reason_code)
            elif isinstance(packet, PubRec):
                if packet.reason_code >= 0x80:  # 5.0: refused, and no PUBREL follows
                    self._complete(packet.packet_id, packet.reason_code)
                else:
                    self._out.append(encode(PubRel(packet.packet_id)))
            elif isinstance(packet, SubAck):
                self._subscribing.discard(packet.packet_id)
                events.append(SubscribeAnswered(packet.packet_id, list(packet.return_codes)))
            elif isinstance(packet, Publish):
                if self._arrived(packet):
                    events.append(MessageArrived(packet))
            elif isinstance(packet, PubRel):
                self._held_qos2.discard(packet.packet_id)
                self._out.append(encode(PubComp(packet.packet_id)))
            elif isinstance(packet, Disconnect):
                props = packet.properties
                reason = props.reason_string if props is not None else None
                events.append(Disconnected(packet.reason_code, reason or ""))
        return events

    def _complete(self, packet_id: int, reason_code: int) -> None:
        position = self._inflight.pop(packet_id, None)
        if position is not None:
            if reason_code >= 0x80:
                self.refusals.append((packet_id, reason_code))
            self._finish(position)

    def _arrived(self, packet: Publish) -> bool:
        if packet.qos == 1:
            self._out.append(encode(PubAck(packet.packet_id)))
        elif packet.qos == 2:
            self._out.append(encode(PubRec(packet.packet_id)))
            if packet.packet_id in self._held_qos2:
                return False  # a re-sent copy of one already received: exactly once
            self._held_qos2.add(packet.packet_id)
        return True

    # -- bookkeeping ------------------------------------------------------------------------

    def _allocate(self) -> int:
        while True:
            packet_id = self._next_id
            self._next_id = packet_id % 65535 + 1
            if packet_id not in self._inflight and packet_id not in self._subscribing:
                return packet_id

    def _finish(self, position: int) -> None:
        """Publication `position` is done; count it once all before it are done too."""
        self._done.add(position)
        while self._order and self._order[0] in self._done:
            self._done.discard(self._order.popleft())
            self.completed += 1
