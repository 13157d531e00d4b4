"""Protocol errors, split by blame (as h11 does).

`RemoteProtocolError` means the peer broke the protocol: the connection must be
closed (the message says why, for the log). `LocalProtocolError` means the
caller asked the state machine for something the protocol forbids.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every MQTT protocol error."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something invalid; close its connection."""


class MalformedPacket(RemoteProtocolError):
    """Bytes that do not form a valid MQTT packet (the codec's only error).

    `reason` is the MQTT 5.0 reason code an MQTT 5.0 peer is sent before the close: 0x81
    (malformed packet) unless the error says otherwise (0x82 protocol error, 0x95 packet too
    large, ...).
    """

    def __init__(self, message: str, reason: int = 0x81) -> None:
        super().__init__(message)
        self.reason = reason


class LocalProtocolError(ProtocolError):
    """The local side tried to do something the protocol forbids."""


class PacketIdsExhausted(LocalProtocolError):
    """All 65,535 packet identifiers are in use on this session."""
