"""A standby's MQTT listeners: every CONNECT is refused, "server unavailable" (docs/ha.md).

Theory of operation
-------------------
While a broker with `[ha]` stands by, it holds no state (it builds it once it wins the
election), yet its MQTT listeners stay open: a client, or a load balancer's plain TCP
check, learns at once that this broker does not serve, instead of waiting on a closed port
or a connection timeout. Each connection (`StandbyRefusal`, on a `TcpListener` like the
active broker's) reads one CONNECT and answers:

- MQTT 3.1 and 3.1.1: CONNACK return code 3, "server unavailable";
- MQTT 5.0: CONNACK 0x88 (Server unavailable) with a Reason String, and the Server
  Reference `[ha] server_reference` names when set (MQTT 5.0 4.11: where the client may
  go instead, the active broker or a load balancer in front of it);

then closes. Anything else first, a malformed packet, or nothing within the CONNECT
timeout, closes the connection without an answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from ...protocol import (
    ConnAck,
    Connect,
    ConnectReturnCode,
    Decoder,
    MalformedPacket,
    Properties,
    ProtocolLevel,
    ReasonCode,
    encode,
)

__all__ = ["StandbyRefusal", "refusal"]

log = logging.getLogger("telemq.broker")

REASON = "this broker is a standby"


def refusal(connect: Connect, server_reference: str) -> bytes:
    """The CONNACK that refuses `connect` at a standby (see the module docstring)."""
    if connect.protocol_level == ProtocolLevel.MQTT_5 and connect.protocol_name == "MQTT":
        properties = Properties(reason_string=REASON, server_reference=server_reference or None)
        return encode(ConnAck(ReasonCode.SERVER_UNAVAILABLE, False, properties), 5)
    return encode(ConnAck(ConnectReturnCode.SERVER_UNAVAILABLE, False))


class StandbyRefusal(asyncio.Protocol):
    """One connection to a standby's MQTT listener."""

    def __init__(self, server_reference: str, max_packet_size: int, timeout: float) -> None:
        self._reference = server_reference
        self._decoder = Decoder(max_packet_size, mqtt5=True)
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._timeout, self._transport.close)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            packets = self._decoder.feed(data)
        except MalformedPacket:
            transport.close()
            return
        if not packets:
            return
        first = packets[0]
        if isinstance(first, Connect):
            transport.write(refusal(first, self._reference))
            log.debug("standby: refused client %r", first.client_id)
        transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._transport = None
