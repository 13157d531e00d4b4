"""What the server writes to one MQTT connection: the output half of `Connection`.

Theory of operation
-------------------
`ConnectionOutput` holds the bytes waiting to be written (`data_to_send` takes them all at
once, so that the owner writes one buffer per loop iteration) and the outbound half of the
session's flows: QoS 1/2 PUBLISHes tracked until acknowledged (`deliver`), re-sent in order
with DUP=1 when a session resumes (`resend_inflight`), and acknowledgements of the client's
PUBLISHes (`acknowledge`). At MQTT 5.0 the connection's `Peer5` writes the packets: within
the client's Receive Maximum (the rest wait in `_waiting` for room), never larger than its
Maximum Packet Size, with the topic aliases it allows.

`Connection` (connection.py) is this class plus the input side: it reads packets, runs the
handshake and the timers, and sets the state kept here. Nothing here reads a clock or does
I/O.
"""

from __future__ import annotations

from .codec import encode, encode_ack, encode_publish
from .errors import LocalProtocolError
from .flows import Flows, Inflight, InflightState
from .packets import Packet, PacketType
from .peer5 import Peer5


class ConnectionOutput:
    """The output half of a server-side connection (see module docstring)."""

    __slots__ = ("_out", "_waiting", "bytes_sent", "closed", "flows", "peer5", "protocol_level")

    _out: list[bytes]
    # MQTT 5.0: packet ids in flight not re-sent yet on this connection: beyond the
    # client's Receive Maximum when it resumed its session (`resend_inflight`).
    _waiting: list[int]
    bytes_sent: int
    closed: bool  # the connection is over: nothing more is written
    flows: Flows | None  # the session's, from `accept`
    peer5: Peer5 | None  # the client's side at level 5; None at 3.1/3.1.1
    protocol_level: int

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
        elif self.peer5 is not None:
            out.append(self.peer5.encode_publish(inflight, True))
        else:
            out.append(
                encode_publish(
                    inflight.topic,
                    inflight.payload,
                    inflight.qos,
                    inflight.retain,
                    True,
                    inflight.packet_id,
                )
            )

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
        """Queue already encoded bytes (e.g. a QoS 0 PUBLISH shared by many subscribers)."""
        if not self.closed:
            self._out.append(data)

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
        if self.peer5 is not None:
            return self.peer5.encode_publish(inflight, False)
        return encode_publish(
            inflight.topic, inflight.payload, inflight.qos, inflight.retain, False, packet_id
        )

    def data_to_send(self) -> bytes:
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.bytes_sent += len(data)
        return data
