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
    """Bytes that do not form a valid MQTT packet (the codec's only error)."""


class LocalProtocolError(ProtocolError):
    """The local side tried to do something the protocol forbids."""


class PacketIdsExhausted(LocalProtocolError):
    """All 65,535 packet identifiers are in use on this session."""
