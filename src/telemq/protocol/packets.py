"""MQTT 3.1 / 3.1.1 / 5.0 control packets as plain data.

Packets are mutable slotted dataclasses: cheap to build on the hot path, and
comparable with `==` in tests. They carry no protocol-level knowledge beyond
their fields; the codec turns them into bytes and back.

The fields MQTT 5.0 added come last, with defaults, so that 3.1/3.1.1 code builds packets
as before: `properties` (None for none: the decoder never produces an empty `Properties`,
and the encoder writes None and an empty one alike) and `reason_code` (0, success). At
3.1/3.1.1 the codec ignores them, and the decoder leaves them at their defaults.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # properties -> reasons -> packets: only the annotations need it here
    from .property_table import Properties


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
    AUTH = 15  # MQTT 5.0 only


class ProtocolLevel(enum.IntEnum):
    """The protocol level byte of CONNECT."""

    MQTT_3_1 = 3  # protocol name "MQIsdp"
    MQTT_3_1_1 = 4  # protocol name "MQTT"
    MQTT_5 = 5  # protocol name "MQTT"


PROTOCOL_NAMES: dict[int, str] = {
    ProtocolLevel.MQTT_3_1: "MQIsdp",
    ProtocolLevel.MQTT_3_1_1: "MQTT",
    ProtocolLevel.MQTT_5: "MQTT",
}


class ConnectReturnCode(enum.IntEnum):
    """CONNACK return codes (identical in 3.1 and 3.1.1; MQTT 5.0 has reason codes instead)."""

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
    properties: Properties | None = None  # 5.0: the Will Properties of CONNECT's payload


@dataclass(slots=True, init=False)
class Connect:
    client_id: str
    protocol_level: int
    clean_session: bool  # 5.0: Clean Start (the same bit 1 of the connect flags)
    keepalive: int
    will: Will | None
    username: str | None
    password: bytes | None  # 5.0 allows a password without a user name
    protocol_name: str
    properties: Properties | None  # 5.0
    # 3.1/3.1.1: the level byte had bit 7 set (0x83, 0x84), a bridge's private level
    # (Mosquitto's try_private); `protocol_level` is the level itself.
    bridge: bool
    packet_type = PacketType.CONNECT

    def __init__(
        self,
        client_id: str,
        protocol_level: int = ProtocolLevel.MQTT_3_1_1,
        clean_session: bool = True,
        keepalive: int = 60,
        will: Will | None = None,
        username: str | None = None,
        password: bytes | None = None,
        protocol_name: str = "MQTT",
        properties: Properties | None = None,
        bridge: bool = False,
    ) -> None:
        self.client_id = client_id
        self.protocol_level = protocol_level
        self.clean_session = clean_session
        self.keepalive = keepalive
        self.will = will
        self.username = username
        self.password = password
        self.protocol_name = protocol_name
        self.properties = properties
        self.bridge = bridge

    def copy(self) -> Connect:
        """A copy to change: `dataclasses.replace` would pass the compiled build's class
        attribute `packet_type` to `__init__` as a field."""
        return Connect(
            self.client_id,
            self.protocol_level,
            self.clean_session,
            self.keepalive,
            self.will,
            self.username,
            self.password,
            self.protocol_name,
            self.properties,
            self.bridge,
        )


@dataclass(slots=True, init=False)
class ConnAck:
    # 3.1/3.1.1: a `ConnectReturnCode`; 5.0: the Connect Reason Code (0x00 or 0x80 and above).
    return_code: int
    session_present: bool
    properties: Properties | None  # 5.0
    packet_type = PacketType.CONNACK

    def __init__(
        self,
        return_code: int = ConnectReturnCode.ACCEPTED,
        session_present: bool = False,
        properties: Properties | None = None,
    ) -> None:
        self.return_code = return_code
        self.session_present = session_present
        self.properties = properties


@dataclass(slots=True, init=False)
class Publish:
    topic: str  # 5.0: "" when a Topic Alias (in `properties`) stands for the name
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int  # 0 = none (QoS 0); QoS 1/2 need 1..65535
    # The received bytes of a plain QoS 0 PUBLISH (no DUP, no RETAIN) at 3.1/3.1.1: exactly
    # what a QoS 0 subscriber is sent, so a broker can forward it without encoding. None
    # otherwise, and always at 5.0 (properties, a topic alias, are not for every receiver).
    frame: bytes | None = field(compare=False, repr=False)
    properties: Properties | None  # 5.0
    packet_type = PacketType.PUBLISH

    # Written out, as for the acknowledgements below: the `__init__` dataclasses would
    # generate stays interpreted under mypyc, and costs more with every field 5.0 added.
    def __init__(
        self,
        topic: str,
        payload: bytes = b"",
        qos: int = 0,
        retain: bool = False,
        dup: bool = False,
        packet_id: int = 0,
        frame: bytes | None = None,
        properties: Properties | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.frame = frame
        self.properties = properties


# PUBACK, PUBREC, PUBREL, PUBCOMP: `reason_code` and `properties` are 5.0's; a 5.0 reason
# code of 0 without properties is the 3.1.1 form on the wire (remaining length 2).


@dataclass(slots=True, init=False)
class PubAck:
    packet_id: int
    reason_code: int
    properties: Properties | None
    packet_type = PacketType.PUBACK

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties | None = None
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)
class PubRec:
    packet_id: int
    reason_code: int
    properties: Properties | None
    packet_type = PacketType.PUBREC

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties | None = None
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)
class PubRel:
    packet_id: int
    dup: bool  # 3.1 senders may set DUP on a retried PUBREL
    reason_code: int
    properties: Properties | None
    packet_type = PacketType.PUBREL

    def __init__(
        self,
        packet_id: int,
        dup: bool = False,
        reason_code: int = 0,
        properties: Properties | None = None,
    ) -> None:
        self.packet_id = packet_id
        self.dup = dup
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)
class PubComp:
    packet_id: int
    reason_code: int
    properties: Properties | None
    packet_type = PacketType.PUBCOMP

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties | None = None
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


# Subscription options (5.0, §3.8.3.1): the byte that follows each topic filter of SUBSCRIBE.
# At 3.1/3.1.1 the byte is the requested QoS alone.
SUBSCRIPTION_QOS = 0x03  # maximum QoS, bits 0-1 (3 is a Protocol Error)
NO_LOCAL = 0x04  # bit 2: not sent the messages it publishes itself
RETAIN_AS_PUBLISHED = 0x08  # bit 3: RETAIN kept as published when forwarded
RETAIN_HANDLING = 0x30  # bits 4-5: 0 send retained, 1 only if new, 2 never (3 is an error)
RETAIN_HANDLING_SHIFT = 4
SUBSCRIPTION_RESERVED = 0xC0  # bits 6-7 must be 0 (else malformed)


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    # (filter, requested QoS) at 3.1/3.1.1; (filter, subscription options byte) at 5.0, whose
    # bits 0-1 are the QoS, so that `options & SUBSCRIPTION_QOS` reads the QoS at any level.
    topics: list[tuple[str, int]] = field(default_factory=list)
    dup: bool = False  # 3.1 only
    properties: Properties | None = None  # 5.0
    packet_type = PacketType.SUBSCRIBE


@dataclass(slots=True)
class SubAck:
    packet_id: int
    # 3.1/3.1.1: granted QoS or SUBACK_FAILURE; 5.0: one reason code per filter.
    return_codes: list[int] = field(default_factory=list)
    properties: Properties | None = None  # 5.0
    packet_type = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topics: list[str] = field(default_factory=list)
    dup: bool = False  # 3.1 only
    properties: Properties | None = None  # 5.0
    packet_type = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)  # 5.0 only: one per filter
    properties: Properties | None = None  # 5.0
    packet_type = PacketType.UNSUBACK


@dataclass(slots=True, init=False)
class PingReq:
    packet_type = PacketType.PINGREQ

    def __init__(self) -> None:  # written out, compiled: one per keep-alive period
        pass


@dataclass(slots=True, init=False)
class PingResp:
    packet_type = PacketType.PINGRESP

    def __init__(self) -> None:
        pass


@dataclass(slots=True, init=False)
class Disconnect:
    reason_code: int  # 5.0: the Disconnect Reason Code (0: normal disconnection)
    properties: Properties | None  # 5.0
    packet_type = PacketType.DISCONNECT

    def __init__(self, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True)
class Auth:
    """AUTH (5.0 only): a step of enhanced authentication."""

    reason_code: int = 0  # 0x00 success, 0x18 continue authentication, 0x19 re-authenticate
    properties: Properties | None = None
    packet_type = PacketType.AUTH


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
    | Auth
)
