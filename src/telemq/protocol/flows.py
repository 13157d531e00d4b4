"""The QoS 1 / QoS 2 state of one session, in both directions.

A `Flows` object belongs to a session, not to a network connection: a
persistent session keeps it across reconnections, and the broker rebuilds it
from the store after a restart. It holds

* outbound: packet id -> `Inflight` for every PUBLISH sent and not yet completed
  (PUBACK for QoS 1; PUBREC then PUBCOMP for QoS 2), in the order they were
  first sent, which is the order they are re-sent in [MQTT-4.6.0-1];
* incoming: packet id -> the broker's stored message, for every QoS 2 PUBLISH
  received and not yet released by PUBREL (the exactly-once guard);
* released: packet id -> fingerprint of the last `RELEASED_IDS_KEPT` QoS 2 messages released,
  with the number of the connection that released them. A client that loses the PUBCOMP
  with its connection re-sends PUBREL, as it must; paho-mqtt (2.x, still in 2.1) re-sends
  the PUBLISH itself, with DUP=0, once a reconnection attempt has failed. Such a PUBLISH,
  on a later connection, with a remembered id, topic, payload and RETAIN, is that message
  again, not a new one (docs/reliability.md, "QoS 2 step by step").

Packet ids are 1..65535, never 0 and never one in use in the same direction
[MQTT-2.3.1-1..4]. Nothing here reads a clock: `now` is passed in.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass
from typing import Final, TypeAlias

from .errors import LocalProtocolError, PacketIdsExhausted

MAX_PACKET_ID = 65535
# Released QoS 2 ids remembered per session: a client's re-sends after a reconnection are
# what it had in flight, and clients keep far fewer than this in flight (paho: 20).
RELEASED_IDS_KEPT = 256

# What the owner attaches to a delivery or a held message: opaque to the protocol. A named
# alias rather than a bare `object` in dataclass fields, because the compiled build (mypyc)
# resolves those annotations in this module's namespace, where builtins are not found.
OwnerRef: TypeAlias = object


class InflightState(enum.IntEnum):
    PUBLISHED = 1  # waiting for PUBACK (QoS 1) or PUBREC (QoS 2)
    RELEASED = 2  # QoS 2: PUBREL sent, waiting for PUBCOMP


@dataclass(slots=True, init=False)
class Inflight:
    """One outbound QoS 1/2 message in flight, with what is needed to re-send it. One per
    such message: its `__init__` is written out, compiled (see events.py)."""

    packet_id: int
    qos: int
    topic: bytes
    payload: bytes
    retain: bool
    ref: OwnerRef
    state: InflightState
    sent_at: float
    # MQTT 5.0: the PUBLISH's properties, encoded one after the other without their length
    # (subscription identifiers, the message's own properties), to re-send it the same.
    properties: bytes

    def __init__(
        self,
        packet_id: int,
        qos: int,
        topic: bytes,
        payload: bytes,
        retain: bool,
        ref: OwnerRef,
        state: InflightState = InflightState.PUBLISHED,
        sent_at: float = 0.0,
        properties: bytes = b"",
    ) -> None:
        self.packet_id = packet_id
        self.qos = qos
        self.topic = topic
        self.payload = payload
        self.retain = retain
        self.ref = ref
        self.state = state
        self.sent_at = sent_at
        self.properties = properties


# `Flows.outbound`, `Flows.incoming` and `Flows.released` of every session without any:
# never written to (the methods that add give the session its own first), only read,
# popped from, cleared.
NOTHING_IN_FLIGHT: Final[dict[int, Inflight]] = {}
NOTHING_HELD: Final[dict[int, object]] = {}
NOTHING_RELEASED: Final[dict[int, tuple[int, int]]] = {}


class Flows:
    """Packet ids and in-flight tables of one session (see the module docstring)."""

    __slots__ = (
        "_last_id",
        "configured_inflight",
        "connection_number",
        "incoming",
        "max_inflight",
        "outbound",
        "released",
    )

    def __init__(self, max_inflight: int = 0) -> None:
        self.configured_inflight = max_inflight if max_inflight > 0 else MAX_PACKET_ID
        self.max_inflight = self.configured_inflight
        # The three start as the shared empties (an idle client has nothing in flight, most
        # never receive QoS 2): `track`, `hold_incoming` and `remember_released` give the
        # session its own at the first.
        self.outbound: dict[int, Inflight] = NOTHING_IN_FLIGHT
        self.incoming: dict[int, object] = NOTHING_HELD
        # packet id -> (release_digest, connection_number at the release), oldest first
        self.released: dict[int, tuple[int, int]] = NOTHING_RELEASED
        self.connection_number = 0  # raised by each connection that takes these flows
        self._last_id = 0

    # -- outbound -------------------------------------------------------

    def limit_window(self, receive_maximum: int) -> None:
        """The connection taking these flows accepts at most `receive_maximum` unanswered
        QoS 1/2 PUBLISHes (MQTT 5.0's Receive Maximum; 65535 for 3.1/3.1.1)."""
        self.max_inflight = min(self.configured_inflight, receive_maximum)

    def has_window(self) -> bool:
        """True when another QoS 1/2 message may be sent now."""
        return len(self.outbound) < self.max_inflight

    def allocate_packet_id(self) -> int:
        """The next free packet id after the last one handed out."""
        outbound = self.outbound
        if len(outbound) >= MAX_PACKET_ID:
            raise PacketIdsExhausted("all 65,535 packet identifiers are in use")
        packet_id = self._last_id
        while True:
            packet_id = packet_id % MAX_PACKET_ID + 1
            if packet_id not in outbound:
                self._last_id = packet_id
                return packet_id

    def track(
        self,
        qos: int,
        topic: bytes,
        payload: bytes,
        retain: bool,
        ref: object,
        now: float,
        packet_id: int = 0,
        state: InflightState = InflightState.PUBLISHED,
        properties: bytes = b"",
    ) -> Inflight:
        """Record an outbound message; allocates a packet id unless one is given."""
        if qos not in (1, 2):
            raise LocalProtocolError(f"only QoS 1 and 2 messages are tracked, not QoS {qos}")
        if packet_id == 0:
            packet_id = self.allocate_packet_id()
        elif packet_id in self.outbound or not 0 < packet_id <= MAX_PACKET_ID:
            raise LocalProtocolError(f"packet id {packet_id} is invalid or already in use")
        inflight = Inflight(packet_id, qos, topic, payload, retain, ref, state, now, properties)
        outbound = self.outbound
        if outbound is NOTHING_IN_FLIGHT:
            outbound = self.outbound = {}
        outbound[packet_id] = inflight
        return inflight

    def acknowledge(self, packet_id: int) -> Inflight | None:
        """PUBACK: completes a QoS 1 message; None for an unknown id or wrong QoS."""
        inflight = self.outbound.get(packet_id)
        if inflight is None or inflight.qos != 1:
            return None
        del self.outbound[packet_id]
        return inflight

    def received(self, packet_id: int, now: float) -> Inflight | None:
        """PUBREC: a QoS 2 message moves to RELEASED; None for an unknown id."""
        inflight = self.outbound.get(packet_id)
        if inflight is None or inflight.qos != 2:
            return None
        inflight.state = InflightState.RELEASED
        inflight.sent_at = now
        return inflight

    def complete(self, packet_id: int) -> Inflight | None:
        """PUBCOMP: completes a QoS 2 message; None for an unknown id or state."""
        inflight = self.outbound.get(packet_id)
        if inflight is None or inflight.state is not InflightState.RELEASED:
            return None
        del self.outbound[packet_id]
        return inflight

    # -- incoming QoS 2 -------------------------------------------------

    def is_held(self, packet_id: int) -> bool:
        return packet_id in self.incoming

    def hold_incoming(self, packet_id: int, message: object) -> None:
        incoming = self.incoming
        if incoming is NOTHING_HELD:
            incoming = self.incoming = {}
        incoming[packet_id] = message
        if self.released:
            self.released.pop(packet_id, None)  # the id now names another message

    def release_incoming(self, packet_id: int) -> object | None:
        return self.incoming.pop(packet_id, None)

    # -- released QoS 2 ---------------------------------------------------

    def remember_released(self, packet_id: int, digest: int, connection_number: int) -> int:
        """Remember a released id; returns the id forgotten to make room, or 0."""
        released = self.released
        if released is NOTHING_RELEASED:
            released = self.released = {}
        released.pop(packet_id, None)
        released[packet_id] = (digest, connection_number)
        if len(released) > RELEASED_IDS_KEPT:
            oldest = next(iter(released))
            del released[oldest]
            return oldest
        return 0

    def is_released_resend(self, packet_id: int, topic: str, payload: bytes, retain: bool) -> bool:
        """True for a PUBLISH that repeats a message released on an earlier connection."""
        remembered = self.released.get(packet_id)
        if remembered is None or remembered[1] >= self.connection_number:
            return False  # on the releasing connection the client had its PUBCOMP: a new id
        return remembered[0] == release_digest(topic.encode("utf-8"), payload, retain)


def release_digest(topic: bytes, payload: bytes, retain: bool) -> int:
    """What identifies a released QoS 2 message in `Flows.released`: CRC-32 of the topic,
    RETAIN and payload, with the payload's length (computed on every release of a persistent
    session, so cheap; it only has to tell a re-send from another message under one id)."""
    crc = zlib.crc32(payload, zlib.crc32(topic, 1 if retain else 0))
    return len(payload) << 32 | crc
