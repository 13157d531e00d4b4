"""MQTT 3.1 / 3.1.1 control packets as plain data.

Packets are mutable slotted dataclasses: cheap to build on the hot path, and
comparable with `==` in tests. They carry no protocol-level knowledge beyond
their fields; the codec turns them into bytes and back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PacketType(enum.IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14


class ProtocolLevel(enum.IntEnum):
    """The protocol level byte of CONNECT."""

    MQTT_3_1 = 3  # protocol name "MQIsdp"
    MQTT_3_1_1 = 4  # protocol name "MQTT"


PROTOCOL_NAMES: dict[int, str] = {
    ProtocolLevel.MQTT_3_1: "MQIsdp",
    ProtocolLevel.MQTT_3_1_1: "MQTT",
}


class ConnectReturnCode(enum.IntEnum):
    """CONNACK return codes (identical in 3.1 and 3.1.1)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USERNAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


SUBACK_FAILURE = 0x80  # 3.1.1 only; a 3.1 server has no failure code


@dataclass(slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


@dataclass(slots=True)
class Connect:
    client_id: str
    protocol_level: int = ProtocolLevel.MQTT_3_1_1
    clean_session: bool = True
    keepalive: int = 60
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    protocol_name: str = "MQTT"
    packet_type = PacketType.CONNECT


@dataclass(slots=True)
class ConnAck:
    return_code: int = ConnectReturnCode.ACCEPTED
    session_present: bool = False
    packet_type = PacketType.CONNACK


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0  # 0 = none (QoS 0); QoS 1/2 need 1..65535
    # The received bytes of a plain QoS 0 PUBLISH (no DUP, no RETAIN): exactly what a QoS 0
    # subscriber is sent, so a broker can forward it without encoding. None otherwise.
    frame: bytes | None = field(default=None, compare=False, repr=False)
    packet_type = PacketType.PUBLISH


@dataclass(slots=True)
class PubAck:
    packet_id: int
    packet_type = PacketType.PUBACK


@dataclass(slots=True)
class PubRec:
    packet_id: int
    packet_type = PacketType.PUBREC


@dataclass(slots=True)
class PubRel:
    packet_id: int
    dup: bool = False  # 3.1 senders may set DUP on a retried PUBREL
    packet_type = PacketType.PUBREL


@dataclass(slots=True)
class PubComp:
    packet_id: int
    packet_type = PacketType.PUBCOMP


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    topics: list[tuple[str, int]] = field(default_factory=list)  # (filter, requested QoS)
    dup: bool = False  # 3.1 only
    packet_type = PacketType.SUBSCRIBE


@dataclass(slots=True)
class SubAck:
    packet_id: int
    return_codes: list[int] = field(default_factory=list)
    packet_type = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topics: list[str] = field(default_factory=list)
    dup: bool = False  # 3.1 only
    packet_type = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    packet_type = PacketType.UNSUBACK


@dataclass(slots=True)
class PingReq:
    packet_type = PacketType.PINGREQ


@dataclass(slots=True)
class PingResp:
    packet_type = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    packet_type = PacketType.DISCONNECT


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
)
