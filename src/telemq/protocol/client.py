"""The client side of one MQTT 3.1.1 connection, sans-IO: bytes in, events out.

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
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

from .codec import Decoder, encode, encode_publish
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
from .topics import topic_name_error


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


ClientEvent = ConnectAnswered | SubscribeAnswered | MessageArrived


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

    def __init__(self, window: int = 64) -> None:
        self.window = max(1, window)  # publications in flight at most
        self.completed = 0
        self._decoder = Decoder()
        self._out: list[bytes] = []
        self._next_id = 1
        self._inflight: dict[int, int] = {}  # packet id -> position in the publish order
        self._subscribing: set[int] = set()
        self._order: collections.deque[int] = collections.deque()  # positions not yet counted
        self._done: set[int] = set()  # positions done, waiting for those before them
        self._published = 0
        self._held_qos2: set[int] = set()  # incoming QoS 2 ids received, PUBREL not yet seen

    # -- what the client sends ------------------------------------------------------------

    def connect(
        self,
        client_id: str,
        *,
        clean_session: bool = True,
        keepalive: int = 60,
        username: str | None = None,
        password: bytes | None = None,
    ) -> None:
        self._out.append(
            encode(
                Connect(
                    client_id=client_id,
                    clean_session=clean_session,
                    keepalive=keepalive,
                    username=username,
                    password=password,
                )
            )
        )

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    @property
    def window_full(self) -> bool:
        return len(self._inflight) >= self.window

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Queue one PUBLISH. ValueError for a bad topic or QoS; LocalProtocolError when the
        window is full (wait for acknowledgements first: `window_full`)."""
        problem = publish_error(topic, qos)
        if problem is not None:
            raise ValueError(problem)
        if qos and self.window_full:
            raise LocalProtocolError(f"{self.window} publications are already in flight")
        position = self._published
        self._published += 1
        self._order.append(position)
        packet_id = self._allocate() if qos else 0
        if qos:
            self._inflight[packet_id] = position
        self._out.append(
            encode_publish(topic.encode("utf-8"), payload, qos, retain, False, packet_id)
        )
        if not qos:
            self._finish(position)

    def subscribe(self, filters: Iterable[tuple[str, int]]) -> int:
        """Queue a SUBSCRIBE; returns its packet id (see `SubscribeAnswered`)."""
        packet_id = self._allocate()
        self._subscribing.add(packet_id)
        self._out.append(encode(Subscribe(packet_id, list(filters))))
        return packet_id

    def ping(self) -> None:
        self._out.append(encode(PingReq()))

    def disconnect(self) -> None:
        self._out.append(encode(Disconnect()))

    def data_to_send(self) -> bytes:
        data = b"".join(self._out)
        self._out.clear()
        return data

    # -- what the broker sends --------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[ClientEvent]:
        """Handle bytes from the broker; raises `MalformedPacket` for bytes that are not MQTT."""
        events: list[ClientEvent] = []
        for packet in self._decoder.feed(data):
            if isinstance(packet, ConnAck):
                events.append(ConnectAnswered(packet.return_code, packet.session_present))
            elif isinstance(packet, PubAck | PubComp):
                position = self._inflight.pop(packet.packet_id, None)
                if position is not None:
                    self._finish(position)
            elif isinstance(packet, PubRec):
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
        return events

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
