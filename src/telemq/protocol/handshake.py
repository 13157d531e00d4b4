"""The server's side of the CONNECT / CONNACK exchange, as decisions without state.

Theory of operation
-------------------
`Connection` (connection.py) owns the state of one connection; what a CONNECT means is
decided here, from the packet and the server's MQTT 5.0 limits alone, before the owner (the
broker) hears of it:

* which protocol the client speaks: 3.1 (`MQIsdp`), 3.1.1 or, when the server offers it,
  5.0 (then the client's limits become a `Peer5`, peer5.py);
* the keep-alive it gets: its own, or at 5.0 the server's Server Keep Alive when the client
  asked for none or for longer;
* whether the CONNECT is refused here, with the CONNACK that says so: an unsupported level
  (CONNACK 1), a 3.1 client identifier outside 1..23 characters or an empty one without clean
  session (CONNACK 2), a 5.0 will the server could not publish as given (its QoS above
  Maximum QoS, or RETAIN while retain is unavailable).

The CONNACKs the owner's answer needs (`accept_bytes`, `refusal_bytes`) are encoded here too,
one function for every protocol level, and `connack_problem` says when the CONNACK that
accepts a 5.0 client could not be sent to it (larger than its Maximum Packet Size).
Everything here runs once per connection, never per message.
"""

from __future__ import annotations

from .codec import encode
from .packets import ConnAck, Connect, ConnectReturnCode, ProtocolLevel
from .peer5 import Peer5, ServerLimits5
from .reasons import REFUSAL_REASONS, ReasonCode

MAX_CLIENT_ID_3_1 = 23


class ConnectVerdict:
    """What a CONNECT asks for, and `problem` (with the CONNACK `reply` that refuses it and
    the reason `code`) when it is refused before the owner sees it."""

    __slots__ = ("bridge", "code", "keepalive", "peer5", "problem", "protocol_level", "reply")

    def __init__(
        self,
        protocol_level: int,
        keepalive: int = 0,
        peer5: Peer5 | None = None,
        bridge: bool = False,
        problem: str = "",
        reply: bytes = b"",
        code: ReasonCode = ReasonCode.NORMAL_DISCONNECTION,  # success: nothing refused
    ) -> None:
        self.protocol_level = protocol_level
        self.keepalive = keepalive
        self.peer5 = peer5
        self.bridge = bridge
        self.problem = problem
        self.reply = reply
        self.code = code


def check_connect(packet: Connect, limits: ServerLimits5 | None) -> ConnectVerdict:
    """The verdict on `packet`; `limits` is None on a server that does not offer 5.0."""
    level = packet.protocol_level
    if level == ProtocolLevel.MQTT_5 and limits is not None and packet.protocol_name == "MQTT":
        peer = Peer5.from_connect(packet.properties)
        refusal = None if packet.will is None else limits.will_refusal(packet.will)
        if refusal is not None:
            code, why = refusal
            return ConnectVerdict(level, 0, peer, False, why, peer.refusal(code, why), code)
        keepalive = packet.keepalive
        if limits.server_keep_alive and not 0 < keepalive <= limits.server_keep_alive:
            keepalive = limits.server_keep_alive  # sent back as Server Keep Alive
        # An empty client id is allowed whatever Clean Start says: the server assigns one.
        return ConnectVerdict(level, keepalive, peer)
    if level not in (ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1):
        return ConnectVerdict(
            int(ProtocolLevel.MQTT_3_1_1),
            problem=f"unsupported protocol level {level}",
            reply=encode(ConnAck(ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION)),
            code=ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
        )
    client_id = packet.client_id
    problem = ""
    if level == ProtocolLevel.MQTT_3_1 and not 0 < len(client_id) <= MAX_CLIENT_ID_3_1:
        problem = f"MQTT 3.1 client identifier must be 1 to 23 characters: {client_id!r}"
    elif not client_id and not packet.clean_session:
        problem = "empty client identifier without clean session"
    if problem:
        return ConnectVerdict(
            level,
            bridge=packet.bridge,
            problem=problem,
            reply=encode(ConnAck(ConnectReturnCode.IDENTIFIER_REJECTED)),
            code=ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
        )
    return ConnectVerdict(level, packet.keepalive, None, packet.bridge)


def accept_bytes(
    peer5: Peer5 | None,
    limits: ServerLimits5 | None,
    protocol_level: int,
    session_present: bool,
    keepalive: int,
    assigned_client_id: str | None,
    session_expiry_interval: int | None,
    authentication_data: bytes | None,
) -> bytes:
    """CONNACK 0; at 5.0 with the server's limits and what it decided for this client."""
    if peer5 is not None and limits is not None:
        return peer5.connack(
            limits,
            session_present,
            keepalive,
            assigned_client_id,
            session_expiry_interval,
            authentication_data,
        )
    # MQTT 3.1 has no session present flag: the byte is reserved (0).
    present = session_present and protocol_level >= ProtocolLevel.MQTT_3_1_1
    return encode(ConnAck(ConnectReturnCode.ACCEPTED, present))


def connack_problem(
    peer5: Peer5 | None,
    limits: ServerLimits5 | None,
    keepalive: int,
    assigned_client_id: str | None,
    session_expiry_interval: int | None,
    authentication_data: bytes | None,
) -> str:
    """Why the CONNACK 0 of `accept_bytes` cannot be sent ("" when it can): at 5.0, one
    larger than the client's Maximum Packet Size, which the server must not send
    [MQTT-3.1.2-24]. Its properties state the server's limits and the client id it
    assigned, none of which may be left out, so the connection is closed without CONNACK
    (docs/mqtt5.md, "Maximum Packet Size")."""
    if peer5 is None or limits is None:
        return ""
    size = len(
        peer5.connack(
            limits,
            False,
            keepalive,
            assigned_client_id,
            session_expiry_interval,
            authentication_data,
        )
    )
    if size <= peer5.maximum_packet_size:
        return ""
    return (
        f"the CONNACK ({size} bytes) is larger than the client's Maximum Packet Size "
        f"({peer5.maximum_packet_size} bytes): closed without CONNACK"
    )


def refusal_bytes(
    peer5: Peer5 | None, return_code: ConnectReturnCode, reason: str, code5: ReasonCode | None
) -> tuple[bytes, ReasonCode]:
    """A refusing CONNACK and the reason code the connection closes with: `code5` (by
    default the 5.0 code of `return_code`), carried with `reason` at 5.0."""
    code = code5 if code5 is not None else REFUSAL_REASONS[return_code]
    if peer5 is not None:
        return peer5.refusal(code, reason), code
    return encode(ConnAck(return_code, False)), code
