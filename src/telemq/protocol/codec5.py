"""Bytes <-> packets for MQTT 5.0 (OASIS MQTT Version 5.0, chapter 3).

`codec` owns the `Decoder` and `encode`: at protocol level 5 they use the decoders of
`DECODERS_5` and `encode5` from here (CONNECT, PINGREQ and PINGRESP keep `codec`'s own: a
CONNECT says its level itself, and the pings did not change). The 3.1/3.1.1 functions never
branch on level 5: the level picks the table, once per `Decoder.feed`.

What 5.0 adds to every packet but the pings is a property block (`properties`), and to the
acknowledgements a reason code, which must be one that chapter 3 lists for the packet type
(`VALID_REASON_CODES`; DISCONNECT also takes 0x8C, which Table 2-6 lists for it). The
shortenings the specification allows are decoded, and written when they apply:

- PUBACK, PUBREC, PUBREL, PUBCOMP: remaining length 2 is reason 0 without properties, 3 a
  reason without properties (§3.4.2.1, "If the Remaining Length is less than 4 there is no
  Property Length"). Written: 2 for reason 0, 3 for another reason, without properties.
- DISCONNECT: remaining length 0 is reason 0 without properties, 1 a reason without
  properties (§3.14.2.1). Written: 0 and 1 likewise.
- AUTH: remaining length 0 is reason 0 without properties (§3.15.2.1); 1 (a reason without
  properties) is read as DISCONNECT's, though the specification only names 0. Written: 0, or
  the reason code and a property length.

CONNACK and the other packets always carry their property length.

A PUBLISH decoded here never keeps its `frame`: its properties (a topic alias above all)
belong to one connection, so its bytes are not what another client is sent.

Errors: `MalformedPacket` names the problem; where chapter 3 calls it a Protocol Error the
error is a `PropertyError` (the `MalformedPacket` that carries a reason code, from
`properties`, which raises it for the property blocks) with `reason` 0x82: a zero-length
topic name without a topic alias, a subscription's maximum QoS 3 or retain handling 3, a
SUBSCRIBE or UNSUBSCRIBE without a topic filter; and packet identifier 0 where one is
needed (`wire.zero_packet_id`, reason 0x82 too), checked once the rest of the packet has
parsed, so that a packet also malformed is 0x81 (§4.13). Rules that need the connection's
state (the topic alias maximum, the authentication method of AUTH, who may send which
reason code, a client's Subscription Identifier in PUBLISH) are the connection's.

`encode5` raises `ValueError` for what the decoder would refuse: a reason code not listed
for the packet, invalid subscription options, an empty topic name without a topic alias,
DUP (3.1's) on PUBREL, SUBSCRIBE and UNSUBSCRIBE, and whatever `encode_properties` refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .errors import MalformedPacket
from .packets import (
    RETAIN_HANDLING,
    SUBSCRIPTION_QOS,
    SUBSCRIPTION_RESERVED,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    ProtocolLevel,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from .properties import (
    EMPTY_PROPERTIES_BYTES,
    PROTOCOL_ERROR,
    PropertyError,
    decode_properties,
    encode_properties,
)
from .property_table import Properties, PropertyContext
from .topics import topic_name_error
from .wire import (
    Reader,
    check_flags,
    check_topic_name,
    encode_binary,
    encode_remaining_length,
    encode_string,
    frame,
    zero_packet_id,
)

_LEVEL: Final = 5
_CONNECT: Final = PropertyContext.CONNECT
_CONNACK: Final = PropertyContext.CONNACK
_PUBLISH: Final = PropertyContext.PUBLISH
_PUBACK: Final = PropertyContext.PUBACK
_PUBREC: Final = PropertyContext.PUBREC
_PUBREL: Final = PropertyContext.PUBREL
_PUBCOMP: Final = PropertyContext.PUBCOMP
_SUBSCRIBE: Final = PropertyContext.SUBSCRIBE
_SUBACK: Final = PropertyContext.SUBACK
_UNSUBSCRIBE: Final = PropertyContext.UNSUBSCRIBE
_UNSUBACK: Final = PropertyContext.UNSUBACK
_DISCONNECT: Final = PropertyContext.DISCONNECT
_AUTH: Final = PropertyContext.AUTH
_WILL: Final = PropertyContext.WILL

# The reason codes each packet may carry (§3.2.2.2, §3.4.2.1, §3.5.2.1, §3.6.2.1, §3.7.2.1,
# §3.9.3, §3.11.3, §3.14.2.1 with Table 2-6's 0x8C, §3.15.2.1).
CONNACK_REASONS: Final = frozenset(
    (
        *(0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C),
        *(0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F),
    )
)
PUBACK_REASONS: Final = frozenset((0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99))
PUBREL_REASONS: Final = frozenset((0x00, 0x92))
SUBACK_REASONS: Final = frozenset(
    (0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2)
)
UNSUBACK_REASONS: Final = frozenset((0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91))
DISCONNECT_REASONS: Final = frozenset(
    (
        *(0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F),
        *(0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E),
        *(0x9F, 0xA0, 0xA1, 0xA2),
    )
)
AUTH_REASONS: Final = frozenset((0x00, 0x18, 0x19))

VALID_REASON_CODES: Final[dict[PacketType, frozenset[int]]] = {
    PacketType.CONNACK: CONNACK_REASONS,
    PacketType.PUBACK: PUBACK_REASONS,
    PacketType.PUBREC: PUBACK_REASONS,  # the same list as PUBACK's
    PacketType.PUBREL: PUBREL_REASONS,
    PacketType.PUBCOMP: PUBREL_REASONS,  # the same list as PUBREL's
    PacketType.SUBACK: SUBACK_REASONS,
    PacketType.UNSUBACK: UNSUBACK_REASONS,
    PacketType.DISCONNECT: DISCONNECT_REASONS,
    PacketType.AUTH: AUTH_REASONS,
}


# ---------------------------------------------------------------------------
# Encoding


def _properties_bytes(props: Properties | None, context: PropertyContext) -> bytes:
    return EMPTY_PROPERTIES_BYTES if props is None else encode_properties(props, context)


def _check_reason(code: int, valid: frozenset[int], name: str) -> None:
    if code not in valid:
        raise ValueError(f"{name}: reason code {code} is not valid for this packet")


def _check_no_dup(dup: bool, name: str) -> None:
    if dup:
        raise ValueError(f"{name}: DUP exists only in MQTT 3.1")


def _check_packet_id(packet_id: int) -> None:
    if not 0 <= packet_id <= 0xFFFF:
        raise ValueError(f"packet identifier {packet_id} is out of range")


def encode_publish5(
    topic: bytes,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int,
    properties: bytes,
) -> bytes:
    """Encode a 5.0 PUBLISH from an already UTF-8 encoded topic and an already encoded
    property block (`EMPTY_PROPERTIES_BYTES` for none): a message's properties are encoded
    once for all its receivers."""
    header = 0x30 | (qos << 1) | (1 if retain else 0) | (0x08 if dup else 0)
    if qos:
        variable = len(topic).to_bytes(2, "big") + topic + packet_id.to_bytes(2, "big")
    else:
        variable = len(topic).to_bytes(2, "big") + topic
    length = len(variable) + len(properties) + len(payload)
    if length < 128:
        return bytes((header, length)) + variable + properties + payload
    return bytes((header,)) + encode_remaining_length(length) + variable + properties + payload


def encode_connect5(packet: Connect) -> bytes:
    """A level-5 CONNECT (protocol name "MQTT" whatever `protocol_name` says)."""
    flags = 0x02 if packet.clean_session else 0
    payload = encode_string(packet.client_id)
    will = packet.will
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        payload += _properties_bytes(will.properties, _WILL)
        payload += encode_string(will.topic) + encode_binary(will.payload)
    if packet.username is not None:
        flags |= 0x80
        payload += encode_string(packet.username)
    if packet.password is not None:  # 5.0 allows it without a user name
        flags |= 0x40
        payload += encode_binary(packet.password)
    variable = (
        b"\x00\x04MQTT\x05"
        + bytes((flags,))
        + packet.keepalive.to_bytes(2, "big")
        + _properties_bytes(packet.properties, _CONNECT)
    )
    return frame(0x10, variable + payload)


def _encode_ack(
    first: int,
    packet: PubAck | PubRec | PubRel | PubComp,
    context: PropertyContext,
    valid: frozenset[int],
) -> bytes:
    """PUBACK, PUBREC, PUBREL or PUBCOMP: the shortest form that holds the packet."""
    packet_id = packet.packet_id
    code = packet.reason_code
    props = packet.properties
    _check_packet_id(packet_id)
    _check_reason(code, valid, context.name)
    if props is None or props.is_empty():
        if code == 0:
            return bytes((first, 2, packet_id >> 8, packet_id & 0xFF))
        return bytes((first, 3, packet_id >> 8, packet_id & 0xFF, code))
    body = packet_id.to_bytes(2, "big") + bytes((code,)) + encode_properties(props, context)
    return frame(first, body)


def _encode_reason(
    first: int,
    code: int,
    props: Properties | None,
    context: PropertyContext,
    valid: frozenset[int],
) -> bytes:
    """DISCONNECT or AUTH: nothing for reason 0 without properties."""
    _check_reason(code, valid, context.name)
    if props is None or props.is_empty():
        if code == 0:
            return bytes((first, 0))
        if first == 0xE0:  # DISCONNECT may leave out the property length alone
            return bytes((first, 1, code))
        return bytes((first, 2, code, 0))
    return frame(first, bytes((code,)) + encode_properties(props, context))


def _check_options(options: int) -> None:
    if (
        options & SUBSCRIPTION_RESERVED
        or options & SUBSCRIPTION_QOS == 3
        or options & RETAIN_HANDLING == RETAIN_HANDLING
        or options < 0
    ):
        raise ValueError(f"SUBSCRIBE: invalid subscription options 0x{options:02X}")


def _with_id(packet_id: int, props: Properties | None, context: PropertyContext) -> bytes:
    """A packet identifier and a property block: the variable header of (UN)SUB(ACK)."""
    _check_packet_id(packet_id)
    return packet_id.to_bytes(2, "big") + _properties_bytes(props, context)


def encode5(packet: Packet) -> bytes:
    """Serialize any packet for a level-5 connection (`ValueError`: see the docstring)."""
    match packet:
        case Publish():
            props = packet.properties
            if not packet.topic and (props is None or props.topic_alias is None):
                raise ValueError("PUBLISH: an empty topic name needs a topic alias")
            return encode_publish5(
                packet.topic.encode("utf-8"),
                packet.payload,
                packet.qos,
                packet.retain,
                packet.dup,
                packet.packet_id,
                _properties_bytes(props, _PUBLISH),
            )
        case PubAck():
            return _encode_ack(0x40, packet, _PUBACK, PUBACK_REASONS)
        case PubRec():
            return _encode_ack(0x50, packet, _PUBREC, PUBACK_REASONS)
        case PubRel():
            _check_no_dup(packet.dup, "PUBREL")
            return _encode_ack(0x62, packet, _PUBREL, PUBREL_REASONS)
        case PubComp():
            return _encode_ack(0x70, packet, _PUBCOMP, PUBREL_REASONS)
        case ConnAck():
            _check_reason(packet.return_code, CONNACK_REASONS, "CONNACK")
            body = bytes((1 if packet.session_present else 0, packet.return_code))
            return frame(0x20, body + _properties_bytes(packet.properties, _CONNACK))
        case Connect():
            if packet.protocol_level != ProtocolLevel.MQTT_5:
                raise ValueError(f"CONNECT of level {packet.protocol_level} at level 5")
            return encode_connect5(packet)
        case Subscribe():
            _check_no_dup(packet.dup, "SUBSCRIBE")
            body = _with_id(packet.packet_id, packet.properties, _SUBSCRIBE)
            for topic, options in packet.topics:
                _check_options(options)
                body += encode_string(topic) + bytes((options,))
            return frame(0x82, body)
        case SubAck():
            for code in packet.return_codes:
                _check_reason(code, SUBACK_REASONS, "SUBACK")
            body = _with_id(packet.packet_id, packet.properties, _SUBACK)
            return frame(0x90, body + bytes(packet.return_codes))
        case Unsubscribe():
            _check_no_dup(packet.dup, "UNSUBSCRIBE")
            body = _with_id(packet.packet_id, packet.properties, _UNSUBSCRIBE)
            return frame(0xA2, body + b"".join(encode_string(topic) for topic in packet.topics))
        case UnsubAck():
            for code in packet.reason_codes:
                _check_reason(code, UNSUBACK_REASONS, "UNSUBACK")
            body = _with_id(packet.packet_id, packet.properties, _UNSUBACK)
            return frame(0xB0, body + bytes(packet.reason_codes))
        case PingReq():
            return b"\xc0\x00"
        case PingResp():
            return b"\xd0\x00"
        case Disconnect():
            return _encode_reason(
                0xE0, packet.reason_code, packet.properties, _DISCONNECT, DISCONNECT_REASONS
            )
        case Auth():
            return _encode_reason(0xF0, packet.reason_code, packet.properties, _AUTH, AUTH_REASONS)
    raise TypeError(f"not an MQTT packet: {packet!r}")


# ---------------------------------------------------------------------------
# Decoding


def _properties(
    data: bytes, pos: int, end: int, context: PropertyContext, name: str
) -> tuple[Properties | None, int]:
    """The property block at `pos` (None if it is empty) and the position after it."""
    if pos >= end:
        raise MalformedPacket(f"{name}: packet ends before the properties")
    if data[pos] == 0:
        return None, pos + 1
    props, pos = decode_properties(data, pos, end, context)
    return (None if props.is_empty() else props), pos


def _last_properties(
    data: bytes, pos: int, context: PropertyContext, name: str
) -> Properties | None:
    """The property block at `pos`, which must end the packet."""
    size = len(data)
    props, end = _properties(data, pos, size, context, name)
    if end != size:
        raise MalformedPacket(f"{name}: {size - end} unexpected bytes after the properties")
    return props


def _read_properties(reader: Reader, context: PropertyContext) -> Properties | None:
    props, reader.pos = _properties(reader.data, reader.pos, len(reader.data), context, reader.what)
    return props


def _check_code(code: int, valid: frozenset[int], name: str) -> None:
    if code not in valid:
        raise MalformedPacket(f"{name}: reason code 0x{code:02X} is not valid for {name}")


def decode_connect5(reader: Reader) -> Connect:
    """The rest of a level-5 CONNECT, from its connect flags (`reader` read the protocol name
    and level): §3.1.2.3 onwards."""
    flags = reader.byte()
    if flags & 0x01:
        raise MalformedPacket("CONNECT: reserved flag bit 0 is set")
    keepalive = reader.uint16()
    props = _read_properties(reader, _CONNECT)
    client_id = reader.string("client identifier")
    will: Will | None = None
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    if flags & 0x04:
        if will_qos == 3:
            raise MalformedPacket("CONNECT: will QoS 3 is invalid")
        will_props = _read_properties(reader, _WILL)
        will_topic = reader.string("will topic")
        problem = topic_name_error(will_topic)
        if problem:
            raise MalformedPacket(f"CONNECT: will topic: {problem}")
        will = Will(will_topic, reader.binary(), will_qos, will_retain, will_props)
    elif will_qos or will_retain:
        raise MalformedPacket("CONNECT: will QoS/retain set without the will flag")
    username: str | None = None
    password: bytes | None = None
    if flags & 0x80:
        username = reader.string("user name")
    if flags & 0x40:  # a password without a user name is allowed in 5.0 (§3.1.2.9)
        password = reader.binary()
    if reader.remaining():
        raise MalformedPacket(f"CONNECT: {reader.remaining()} unexpected bytes at the end")
    return Connect(
        client_id, _LEVEL, bool(flags & 0x02), keepalive, will, username, password, "MQTT", props
    )


def _decode_connack(first: int, body: bytes, level: int) -> ConnAck:
    check_flags(first, 0, _LEVEL, "CONNACK")
    if len(body) < 3:
        raise MalformedPacket(f"CONNACK: remaining length must be at least 3, got {len(body)}")
    if body[0] & 0xFE:
        raise MalformedPacket("CONNACK: reserved acknowledge flags are set")
    code = body[1]
    _check_code(code, CONNACK_REASONS, "CONNACK")
    return ConnAck(code, bool(body[0] & 0x01), _last_properties(body, 2, _CONNACK, "CONNACK"))


def _decode_publish(first: int, body: bytes, level: int) -> Publish:
    qos = (first >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH: QoS 3 is invalid")
    dup = bool(first & 0x08)
    if dup and qos == 0:
        raise MalformedPacket("PUBLISH: DUP must be 0 for QoS 0")
    size = len(body)
    if size < 2:
        raise MalformedPacket("PUBLISH: packet ends early")
    end = 2 + ((body[0] << 8) | body[1])
    if end > size:
        raise MalformedPacket("PUBLISH: topic runs past the end of the packet")
    try:
        topic = body[2:end].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("PUBLISH: topic name is not valid UTF-8") from None
    if end > 2:
        check_topic_name(topic)
    packet_id = 0
    if qos:
        if end + 2 > size:
            raise MalformedPacket("PUBLISH: packet ends before the packet identifier")
        packet_id = (body[end] << 8) | body[end + 1]
        end += 2
    if end >= size:
        raise MalformedPacket("PUBLISH: packet ends before the properties")
    props: Properties | None = None
    if body[end] == 0:
        end += 1
    else:
        props, end = _properties(body, end, size, _PUBLISH, "PUBLISH")
    if not topic and (props is None or props.topic_alias is None):
        raise PropertyError(  # §3.3.2.1
            "PUBLISH: empty topic name without a topic alias", PROTOCOL_ERROR
        )
    if qos and packet_id == 0:  # checked once the packet parsed: §4.13
        raise zero_packet_id("PUBLISH")
    return Publish(topic, body[end:], qos, bool(first & 0x01), dup, packet_id, None, props)


def _decode_ack(
    cls: type[PubAck | PubRec | PubRel | PubComp],
    name: str,
    flags: int,
    context: PropertyContext,
    valid: frozenset[int],
) -> Callable[[int, bytes, int], Packet]:
    def decode(first: int, body: bytes, level: int) -> Packet:
        if first & 0x0F != flags:
            check_flags(first, flags, _LEVEL, name)
        size = len(body)
        if size < 2:
            raise MalformedPacket(f"{name}: remaining length must be at least 2, got {size}")
        packet_id = (body[0] << 8) | body[1]
        if size == 2:
            if packet_id == 0:
                raise zero_packet_id(name)
            return cls(packet_id)
        code = body[2]
        _check_code(code, valid, name)
        props = None if size == 3 else _last_properties(body, 3, context, name)
        if packet_id == 0:  # checked once the packet parsed: §4.13
            raise zero_packet_id(name)
        return cls(packet_id, reason_code=code, properties=props)

    return decode


def _decode_subscribe(first: int, body: bytes, level: int) -> Subscribe:
    check_flags(first, 0b0010, _LEVEL, "SUBSCRIBE")
    reader = Reader(body, "SUBSCRIBE")
    packet_id = reader.uint16()  # 0 is refused once the packet parsed (§4.13)
    props = _read_properties(reader, _SUBSCRIBE)
    topics: list[tuple[str, int]] = []
    while reader.remaining():
        topic_filter = reader.string("topic filter")
        if not topic_filter:
            raise MalformedPacket("SUBSCRIBE: empty topic filter [MQTT-4.7.3-1]")
        options = reader.byte()
        if options & SUBSCRIPTION_RESERVED:
            raise MalformedPacket("SUBSCRIBE: reserved bits of the subscription options are set")
        if options & SUBSCRIPTION_QOS == 3:
            raise PropertyError("SUBSCRIBE: maximum QoS 3 is invalid", PROTOCOL_ERROR)
        if options & RETAIN_HANDLING == RETAIN_HANDLING:
            raise PropertyError("SUBSCRIBE: retain handling 3 is invalid", PROTOCOL_ERROR)
        topics.append((topic_filter, options))
    if not topics:
        raise PropertyError("SUBSCRIBE: no topic filter", PROTOCOL_ERROR)
    if packet_id == 0:
        raise zero_packet_id("SUBSCRIBE")
    return Subscribe(packet_id, topics, False, props)


def _read_ack_codes(
    first: int, body: bytes, name: str, context: PropertyContext, valid: frozenset[int]
) -> tuple[int, list[int], Properties | None]:
    """The packet id, reason codes (one per filter) and properties of a SUBACK/UNSUBACK."""
    check_flags(first, 0, _LEVEL, name)
    reader = Reader(body, name)
    packet_id = reader.uint16()
    props = _read_properties(reader, context)
    codes = list(reader.rest())
    if not codes:
        raise MalformedPacket(f"{name}: no reason code")
    for code in codes:
        _check_code(code, valid, name)
    if packet_id == 0:  # checked once the packet parsed: §4.13
        raise zero_packet_id(name)
    return packet_id, codes, props


def _decode_suback(first: int, body: bytes, level: int) -> SubAck:
    packet_id, codes, props = _read_ack_codes(first, body, "SUBACK", _SUBACK, SUBACK_REASONS)
    return SubAck(packet_id, codes, props)


def _decode_unsubscribe(first: int, body: bytes, level: int) -> Unsubscribe:
    check_flags(first, 0b0010, _LEVEL, "UNSUBSCRIBE")
    reader = Reader(body, "UNSUBSCRIBE")
    packet_id = reader.uint16()  # 0 is refused once the packet parsed (§4.13)
    props = _read_properties(reader, _UNSUBSCRIBE)
    topics: list[str] = []
    while reader.remaining():
        topic_filter = reader.string("topic filter")
        if not topic_filter:
            raise MalformedPacket("UNSUBSCRIBE: empty topic filter [MQTT-4.7.3-1]")
        topics.append(topic_filter)
    if not topics:
        raise PropertyError("UNSUBSCRIBE: no topic filter", PROTOCOL_ERROR)
    if packet_id == 0:
        raise zero_packet_id("UNSUBSCRIBE")
    return Unsubscribe(packet_id, topics, False, props)


def _decode_unsuback(first: int, body: bytes, level: int) -> UnsubAck:
    packet_id, codes, props = _read_ack_codes(first, body, "UNSUBACK", _UNSUBACK, UNSUBACK_REASONS)
    return UnsubAck(packet_id, codes, props)


def _decode_reason(
    cls: type[Disconnect | Auth], name: str, context: PropertyContext, valid: frozenset[int]
) -> Callable[[int, bytes, int], Packet]:
    """DISCONNECT or AUTH: an optional reason code, then optional properties."""

    def decode(first: int, body: bytes, level: int) -> Packet:
        check_flags(first, 0, _LEVEL, name)
        size = len(body)
        if size == 0:
            return cls()
        code = body[0]
        _check_code(code, valid, name)
        return cls(code, None if size == 1 else _last_properties(body, 1, context, name))

    return decode


# Every packet type of level 5 but CONNECT, PINGREQ and PINGRESP (see the module docstring).
DECODERS_5: Final[dict[int, Callable[[int, bytes, int], Packet]]] = {
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBLISH: _decode_publish,
    PacketType.PUBACK: _decode_ack(PubAck, "PUBACK", 0, _PUBACK, PUBACK_REASONS),
    PacketType.PUBREC: _decode_ack(PubRec, "PUBREC", 0, _PUBREC, PUBACK_REASONS),
    PacketType.PUBREL: _decode_ack(PubRel, "PUBREL", 0b0010, _PUBREL, PUBREL_REASONS),
    PacketType.PUBCOMP: _decode_ack(PubComp, "PUBCOMP", 0, _PUBCOMP, PUBREL_REASONS),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_unsuback,
    PacketType.DISCONNECT: _decode_reason(
        Disconnect, "DISCONNECT", _DISCONNECT, DISCONNECT_REASONS
    ),
    PacketType.AUTH: _decode_reason(Auth, "AUTH", _AUTH, AUTH_REASONS),
}
